package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/jsonblob"
)

// writeFile writes a whole file.
func (ss *session) writeFile(ctx context.Context, j *job) (any, error) {
	var p api.WriteFileParams
	if e := decodeParams(api.MethodWriteFile, j.req.params, &p); e != nil {
		return nil, e
	}
	if e := needPath(api.MethodWriteFile, p.Path); e != nil {
		return nil, e
	}
	data, e := writeFileContent(j, &p)
	if e != nil {
		return nil, e
	}
	mode, e := fileMode(api.MethodWriteFile, p.Mode, 0o644)
	if e != nil {
		return nil, e
	}
	if p.Offset != nil && *p.Offset < 0 {
		jsonblob.Recycle(data)
		return nil, invalidParams("write_file params: offset must not be negative")
	}
	if p.Truncate && p.Offset == nil {
		jsonblob.Recycle(data)
		return nil, invalidParams(`write_file params: "truncate" goes with "offset": without it, write_file replaces the whole file`)
	}
	sbe, err := ss.resolve(p.SandboxID)
	if err != nil {
		jsonblob.Recycle(data)
		return nil, err
	}
	if p.Offset != nil {
		_, err = sbe.sb.WriteFileAt(ctx, p.Path, bytes.NewReader(data), *p.Offset, mode, p.Truncate)
	} else {
		err = sbe.sb.WriteFile(ctx, p.Path, data, mode)
	}
	// Nothing refers to data any more: keep its memory for the next
	// large request.
	jsonblob.Recycle(data)
	if err != nil {
		return nil, fileError(ctx, sbe, "write", p.Path, err)
	}
	return api.WriteFileResult{Size: int64(len(data))}, nil
}

// writeFileContent decodes the content of a write_file request: from the
// params, or as cut out of a large request line.
func writeFileContent(j *job, p *api.WriteFileParams) ([]byte, *api.Error) {
	raw := j.req.content
	if raw == nil {
		return decodeBase64(api.MethodWriteFile, "content", p.Content)
	}
	// Into memory kept from an earlier large request if there is some.
	data, err := jsonblob.AppendDecode(jsonblob.Buffer(jsonblob.DecodedLen(raw)), raw)
	var e *api.Error
	if err != nil {
		// The same error as from the params.
		data, e = decodeBase64(api.MethodWriteFile, "content", string(raw))
	}
	// Nothing else refers to the line: keep its memory for the next one.
	jsonblob.Recycle(j.req.line)
	j.req.content, j.req.line = nil, nil
	return data, e
}

// readFile reads a whole file, within max_bytes and what fits in one
// response.
func (ss *session) readFile(ctx context.Context, j *job) (any, error) {
	var p api.ReadFileParams
	if e := decodeParams(api.MethodReadFile, j.req.params, &p); e != nil {
		return nil, e
	}
	if e := needPath(api.MethodReadFile, p.Path); e != nil {
		return nil, e
	}
	if p.HostPath != "" {
		return ss.readFileToHost(ctx, &p)
	}
	limit := ss.opts.maxReadBytes()
	maxBytes := p.MaxBytes
	switch {
	case maxBytes < 0:
		return nil, invalidParams("read_file params: max_bytes must not be negative")
	case p.Offset < 0:
		return nil, invalidParams("read_file params: offset must not be negative")
	case p.Length < 0:
		return nil, invalidParams("read_file params: length must not be negative")
	case maxBytes == 0 && p.Length > limit:
		return nil, rpcError(api.CodeLimitExceeded, "read_file: length %d does not fit in one message (at most %d bytes, base64-encoded in a %d byte message): read the file in smaller parts, or raise the message limit (airlock rpc --max-message-mb)", p.Length, limit, ss.opts.MaxMessage)
	case maxBytes == 0 && p.Length > 0:
		maxBytes = p.Length
	case maxBytes == 0:
		maxBytes = min(DefaultMaxReadBytes, limit)
	case maxBytes > limit:
		return nil, rpcError(api.CodeLimitExceeded, "read_file: max_bytes %d does not fit in one message (at most %d bytes, base64-encoded in a %d byte message): read the file in parts (offset and length), or raise the message limit (airlock rpc --max-message-mb)", maxBytes, limit, ss.opts.MaxMessage)
	}
	sbe, err := ss.resolve(p.SandboxID)
	if err != nil {
		return nil, err
	}
	// Hold the file's size against the budget of file data in flight,
	// so that many large reads at once wait rather than fill memory.
	info, err := sbe.sb.Stat(ctx, p.Path)
	if err != nil {
		return nil, fileError(ctx, sbe, "read", p.Path, err)
	}
	want := max(info.Size-p.Offset, 0)
	if p.Length > 0 {
		want = min(want, p.Length)
	}
	buf := &budgetBuffer{b: ss.readBytes, held: min(want, maxBytes)}
	if err := ss.readBytes.acquire(ctx, buf.held); err != nil {
		return nil, commonError(ctx, sbe, err)
	}
	defer buf.release()
	// Room for the whole file at once, rather than copies as it grows,
	// in memory kept from an earlier large request if there is some.
	buf.buf = jsonblob.Buffer(int(buf.held))
	var fi airlock.FileInfo
	if p.Offset == 0 && p.Length == 0 {
		fi, err = sbe.sb.ReadFileTo(ctx, p.Path, buf, maxBytes)
	} else {
		fi, _, err = sbe.sb.ReadFileAt(ctx, p.Path, &limitWriter{w: buf, n: maxBytes, max: maxBytes, path: p.Path}, p.Offset, p.Length)
	}
	if err != nil {
		jsonblob.Recycle(buf.buf)
		if buf.overBudget {
			return nil, rpcError(api.CodeLimitExceeded, "read %s: the file grew while being read and the server holds too much file data for other requests: retry", quote(p.Path))
		}
		return nil, fileError(ctx, sbe, "read", p.Path, err)
	}
	// The content goes into the response line as base64 without
	// encoding/json going over it; then its memory is kept for reuse.
	return &blobResult{
		v:       api.ReadFileResult{Size: int64(len(buf.buf)), Mode: uint32(fi.Mode), FileSize: fi.Size},
		blobs:   []jsonblob.Blob{{Key: "content", Data: buf.buf}},
		recycle: true,
	}, nil
}

// readFileToHost is read_file with host_path: the content goes to that
// host file, not into the response, so no message limit applies; what
// is read is bounded by max_bytes when set and by the file's size as
// the read starts.
func (ss *session) readFileToHost(ctx context.Context, p *api.ReadFileParams) (any, error) {
	switch {
	case p.MaxBytes < 0:
		return nil, invalidParams("read_file params: max_bytes must not be negative")
	case p.Offset < 0:
		return nil, invalidParams("read_file params: offset must not be negative")
	case p.Length < 0:
		return nil, invalidParams("read_file params: length must not be negative")
	case !filepath.IsAbs(p.HostPath):
		return nil, invalidParams("read_file params: host_path %s is not an absolute path", quote(p.HostPath))
	}
	sbe, err := ss.resolve(p.SandboxID)
	if err != nil {
		return nil, err
	}
	// The client made the file: it is opened, never created, and not
	// through a symbolic link.
	f, err := os.OpenFile(p.HostPath, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, invalidParams("read_file: open host_path %s (it must be an existing regular file this server may write): %v", quote(p.HostPath), err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, invalidParams("read_file: host_path %s is not a regular file", quote(p.HostPath))
	}
	if err := f.Truncate(0); err != nil {
		return nil, invalidParams("read_file: truncate host_path %s: %v", quote(p.HostPath), err)
	}
	info, err := sbe.sb.Stat(ctx, p.Path)
	if err != nil {
		return nil, fileError(ctx, sbe, "read", p.Path, err)
	}
	want := max(info.Size-p.Offset, 0)
	if p.Length > 0 {
		want = min(want, p.Length)
	}
	if p.MaxBytes > 0 && p.Offset == 0 && p.Length == 0 && info.Size > p.MaxBytes {
		err := agentproto.Errorf(agentproto.CodeTooLarge, fmt.Sprintf("the file is %d bytes, more than max_bytes (%d)", info.Size, p.MaxBytes))
		return nil, fileError(ctx, sbe, "read", p.Path, err)
	}
	if p.MaxBytes > 0 {
		want = min(want, p.MaxBytes)
	}
	if want == 0 {
		// Length 0 would read to the end of what the file has become.
		return api.ReadFileResult{Mode: uint32(info.Mode), FileSize: info.Size}, nil
	}
	w := &countWriter{w: f}
	fi, _, err := sbe.sb.ReadFileAt(ctx, p.Path, w, p.Offset, want)
	if err != nil {
		return nil, fileError(ctx, sbe, "read", p.Path, err)
	}
	if err := f.Close(); err != nil {
		return nil, rpcError(api.CodeInternal, "read_file: write host_path %s: %v", quote(p.HostPath), err)
	}
	return api.ReadFileResult{Size: w.n, Mode: uint32(fi.Mode), FileSize: fi.Size}, nil
}

// countWriter counts what it writes to w.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// limitWriter refuses more than n bytes: a part read from an offset, to
// the end of a file that is larger than max_bytes.
type limitWriter struct {
	w    io.Writer
	n    int64
	max  int64
	path string
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, agentproto.Errorf(agentproto.CodeTooLarge, fmt.Sprintf("%s has more than the %d byte limit from this offset: give a length", l.path, l.max))
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

// errOverBudget stops a read that outgrew its share of the budget.
var errOverBudget = errors.New("file data in flight over budget")

// budgetBuffer collects a file's content within the bytes it holds of a
// budget, taking more (without waiting, which could deadlock with other
// reads) when the file turns out larger.
type budgetBuffer struct {
	b          *budget
	held       int64
	buf        []byte
	overBudget bool
}

func (w *budgetBuffer) Write(p []byte) (int, error) {
	if need := int64(len(w.buf)+len(p)) - w.held; need > 0 {
		if !w.b.tryAcquire(need) {
			w.overBudget = true
			return 0, errOverBudget
		}
		w.held += need
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *budgetBuffer) release() { w.b.release(w.held) }

// listFiles lists a directory.
func (ss *session) listFiles(ctx context.Context, j *job) (any, error) {
	var p api.PathParams
	if e := decodeParams(api.MethodListFiles, j.req.params, &p); e != nil {
		return nil, e
	}
	if e := needPath(api.MethodListFiles, p.Path); e != nil {
		return nil, e
	}
	sbe, err := ss.resolve(p.SandboxID)
	if err != nil {
		return nil, err
	}
	files, err := sbe.sb.ListFiles(ctx, p.Path)
	if err != nil {
		return nil, fileError(ctx, sbe, "list", p.Path, err)
	}
	res := api.ListFilesResult{Files: make([]api.FileInfo, 0, len(files))}
	for _, f := range files {
		res.Files = append(res.Files, fileInfo(f))
	}
	return res, nil
}

// stat describes a file without following a final symlink.
func (ss *session) stat(ctx context.Context, j *job) (any, error) {
	var p api.PathParams
	if e := decodeParams(api.MethodStat, j.req.params, &p); e != nil {
		return nil, e
	}
	if e := needPath(api.MethodStat, p.Path); e != nil {
		return nil, e
	}
	sbe, err := ss.resolve(p.SandboxID)
	if err != nil {
		return nil, err
	}
	fi, err := sbe.sb.Stat(ctx, p.Path)
	if err != nil {
		return nil, fileError(ctx, sbe, "stat", p.Path, err)
	}
	return fileInfo(fi), nil
}

// mkdir creates a directory (with parents: and any missing parents).
func (ss *session) mkdir(ctx context.Context, j *job) (any, error) {
	var p api.MkdirParams
	if e := decodeParams(api.MethodMkdir, j.req.params, &p); e != nil {
		return nil, e
	}
	if e := needPath(api.MethodMkdir, p.Path); e != nil {
		return nil, e
	}
	mode, e := fileMode(api.MethodMkdir, p.Mode, 0o755)
	if e != nil {
		return nil, e
	}
	sbe, err := ss.resolve(p.SandboxID)
	if err != nil {
		return nil, err
	}
	if err := sbe.sb.Mkdir(ctx, p.Path, mode, p.Parents); err != nil {
		return nil, fileError(ctx, sbe, "mkdir", p.Path, err)
	}
	// The embed API reports writes and removals, not directories made.
	ss.events.publish(airlock.Event{Type: airlock.EventFile, Timestamp: time.Now().Unix(), SandboxID: sbe.sb.ID(), File: &airlock.FileEvent{Op: "mkdir", Path: p.Path}})
	return struct{}{}, nil
}

// remove removes a file or empty directory; with recursive, a tree.
func (ss *session) remove(ctx context.Context, j *job) (any, error) {
	var p api.RemoveParams
	if e := decodeParams(api.MethodRemove, j.req.params, &p); e != nil {
		return nil, e
	}
	if e := needPath(api.MethodRemove, p.Path); e != nil {
		return nil, e
	}
	sbe, err := ss.resolve(p.SandboxID)
	if err != nil {
		return nil, err
	}
	if err := sbe.sb.Remove(ctx, p.Path, p.Recursive); err != nil {
		return nil, fileError(ctx, sbe, "remove", p.Path, err)
	}
	return struct{}{}, nil
}

// symlink makes a symbolic link.
func (ss *session) symlink(ctx context.Context, j *job) (any, error) {
	var p api.SymlinkParams
	if e := decodeParams(api.MethodSymlink, j.req.params, &p); e != nil {
		return nil, e
	}
	if e := needPath(api.MethodSymlink, p.Path); e != nil {
		return nil, e
	}
	if p.Target == "" {
		return nil, invalidParams(`symlink params: "target" is required: what the link points to, such as "../lib/libfoo.so.1"`)
	}
	sbe, err := ss.resolve(p.SandboxID)
	if err != nil {
		return nil, err
	}
	if err := sbe.sb.Symlink(ctx, p.Target, p.Path); err != nil {
		return nil, fileError(ctx, sbe, "symlink", p.Path, err)
	}
	return struct{}{}, nil
}

// setAttr sets a file's mode or modification time.
func (ss *session) setAttr(ctx context.Context, j *job) (any, error) {
	var p api.SetAttrParams
	if e := decodeParams(api.MethodSetAttr, j.req.params, &p); e != nil {
		return nil, e
	}
	if e := needPath(api.MethodSetAttr, p.Path); e != nil {
		return nil, e
	}
	var attr airlock.FileAttr
	if p.Mode != nil {
		if *p.Mode > 0o777 {
			return nil, invalidParams("set_attr params: mode %d (%#o) has bits beyond the permission bits 0777: give permissions only, e.g. 420 for 0644", *p.Mode, *p.Mode)
		}
		attr.SetMode, attr.Mode = true, fs.FileMode(*p.Mode)
	}
	if p.ModTime != nil {
		if p.ModTime.IsZero() {
			return nil, invalidParams("set_attr params: mod_time must be a time, such as \"2024-01-02T15:04:05Z\"")
		}
		attr.ModTime = *p.ModTime
	}
	sbe, err := ss.resolve(p.SandboxID)
	if err != nil {
		return nil, err
	}
	if err := sbe.sb.SetAttr(ctx, p.Path, attr); err != nil {
		return nil, fileError(ctx, sbe, "set_attr", p.Path, err)
	}
	return struct{}{}, nil
}

func needPath(method, path string) *api.Error {
	if path == "" {
		return invalidParams(`%s params: "path" is required: give an absolute path inside the sandbox, such as "/workspace/file.txt"`, method)
	}
	return nil
}

// fileMode checks a mode param; 0 means def.
func fileMode(method string, mode uint32, def fs.FileMode) (fs.FileMode, *api.Error) {
	if mode == 0 {
		return def, nil
	}
	if mode > 0o777 {
		return 0, invalidParams("%s params: mode %d (%#o) has bits beyond the permission bits 0777: give permissions only, e.g. 420 for 0644", method, mode, mode)
	}
	return fs.FileMode(mode), nil
}

// fileInfo is fi on the wire.
func fileInfo(fi airlock.FileInfo) api.FileInfo {
	return api.FileInfo{Name: fi.Name, Size: fi.Size, Mode: uint32(fi.Mode), IsDir: fi.IsDir, ModTime: fi.ModTime, Link: fi.Link}
}
