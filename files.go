package airlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// FileInfo describes a file in a sandbox.
type FileInfo struct {
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	ModTime time.Time   `json:"mod_time"`
	IsDir   bool        `json:"is_dir"`
	// Link is the target of a symbolic link.
	Link string `json:"link,omitempty"`
}

func fromProto(f agentproto.FileInfo) FileInfo {
	return FileInfo{Name: f.Name, Size: f.Size, Mode: fs.FileMode(f.Mode), ModTime: time.Unix(0, f.ModTime), IsDir: f.IsDir, Link: f.Link}
}

// DefaultMaxReadBytes bounds ReadFile unless the caller says otherwise.
const DefaultMaxReadBytes = 1 << 30

// WriteFile writes data to path inside the sandbox, creating parent
// directories. The file is replaced atomically, unless it is a host file
// bound there (a direct mount), which cannot be replaced: it is written
// in place.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	return s.WriteFileFrom(ctx, path, bytes.NewReader(data), mode)
}

// WriteFileFrom streams r into path inside the sandbox.
func (s *Sandbox) WriteFileFrom(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	_, err := s.writeFile(ctx, agentproto.Request{Op: agentproto.OpWriteFile, Path: path, Mode: uint32(mode.Perm())}, r)
	return err
}

// WriteFileAt streams r into the file at path inside the sandbox, from
// offset, in place: the rest of the file stays, and with truncate the
// file is cut where the write ends. A missing file is made with mode's
// permission bits (0: 0644), and its missing parent directories too; a
// final symlink is refused, not followed. Writing at offset 0 with
// truncate rewrites a file in place; a write past the end leaves a hole.
// It returns the bytes written.
func (s *Sandbox) WriteFileAt(ctx context.Context, path string, r io.Reader, offset int64, mode fs.FileMode, truncate bool) (int64, error) {
	if offset < 0 {
		return 0, fmt.Errorf("write %s: negative offset %d", path, offset)
	}
	return s.writeFile(ctx, agentproto.Request{Op: agentproto.OpWriteFile, Path: path, Mode: uint32(mode.Perm()), Offset: offset, InPlace: true, Truncate: truncate}, r)
}

func (s *Sandbox) writeFile(ctx context.Context, req agentproto.Request, r io.Reader) (int64, error) {
	path := req.Path
	st, err := s.open(ctx, req)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	// The agent answers once: after the upload, or as soon as it fails (a
	// full disk, a bad path). Read that answer while sending, so a failure
	// stops the upload instead of leaving it blocked on flow control.
	reply := make(chan error, 1)
	go func() {
		var m agentproto.Msg
		err := s.readReply(ctx, st.c, &m)
		if err != nil {
			st.Conn.Close()
			_ = st.Conn.SetWriteDeadline(time.Now())
		}
		reply <- err
	}()
	n, sendErr := sendFile(st.c, r)
	var srcErr *sourceError
	if errors.As(sendErr, &srcErr) {
		st.Conn.Close()
		_ = st.Conn.SetReadDeadline(time.Now())
		<-reply
		return n, fmt.Errorf("write %s: %w", path, sendErr)
	}
	if err := <-reply; err != nil {
		return n, fmt.Errorf("write %s: %w", path, err)
	}
	if sendErr != nil {
		return n, fmt.Errorf("write %s: %w", path, sendErr)
	}
	s.emit(Event{Type: EventFile, File: &FileEvent{Op: "write", Path: path, Size: n}})
	return n, nil
}

// sourceError is a failure to read the caller's data, as opposed to a
// failure to send it.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return "read source: " + e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// sendFile streams r as Data frames followed by End.
func sendFile(c *agentproto.Conn, r io.Reader) (int64, error) {
	buf := make([]byte, agentproto.ChunkSize)
	var n int64
	for {
		k, rerr := r.Read(buf)
		if k > 0 {
			n += int64(k)
			if err := c.Write(agentproto.Msg{K: agentproto.KData, Data: buf[:k]}); err != nil {
				return n, err
			}
		}
		if rerr == io.EOF {
			return n, c.Write(agentproto.Msg{K: agentproto.KEnd})
		}
		if rerr != nil {
			return n, &sourceError{rerr}
		}
	}
}

// ReadFile reads a file from the sandbox, refusing files larger than
// DefaultMaxReadBytes.
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var b bytes.Buffer
	if _, err := s.ReadFileTo(ctx, path, &b, DefaultMaxReadBytes); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ReadFileTo streams a file from the sandbox into w, refusing files
// larger than max bytes (0: DefaultMaxReadBytes). It returns the file's
// info.
func (s *Sandbox) ReadFileTo(ctx context.Context, path string, w io.Writer, max int64) (FileInfo, error) {
	if max <= 0 {
		max = DefaultMaxReadBytes
	}
	info, _, err := s.readFile(ctx, agentproto.Request{Op: agentproto.OpReadFile, Path: path, MaxBytes: max}, w)
	return info, err
}

// ReadFileAt streams length bytes of a file in the sandbox, from offset,
// into w; length 0 reads to the end of the file, however large. It
// returns the file's info (its whole size) and the bytes written, fewer
// than length when the file ends first (none when offset is at or past
// its end). Memory stays flat whatever the size: data goes to w as it
// comes.
func (s *Sandbox) ReadFileAt(ctx context.Context, path string, w io.Writer, offset, length int64) (FileInfo, int64, error) {
	if offset < 0 || length < 0 {
		return FileInfo{}, 0, fmt.Errorf("read %s: negative offset or length", path)
	}
	return s.readFile(ctx, agentproto.Request{Op: agentproto.OpReadFile, Path: path, Offset: offset, Length: length}, w)
}

func (s *Sandbox) readFile(ctx context.Context, req agentproto.Request, w io.Writer) (FileInfo, int64, error) {
	path, max := req.Path, req.MaxBytes
	if max <= 0 {
		max = math.MaxInt64
	}
	if req.Length > 0 {
		max = min(max, req.Length)
	}
	st, err := s.open(ctx, req)
	if err != nil {
		return FileInfo{}, 0, err
	}
	defer st.Close()
	c := st.c
	var info FileInfo
	var n int64
	for {
		var m agentproto.Msg
		if err := s.readReply(ctx, c, &m); err != nil {
			return info, n, fmt.Errorf("read %s: %w", path, err)
		}
		switch m.K {
		case agentproto.KInfo:
			if m.Info != nil {
				info = fromProto(*m.Info)
				// Size the destination once rather than growing it
				// frame by frame (bytes.Buffer and the like).
				if want := min(info.Size-req.Offset, max); want > 0 && want <= DefaultMaxReadBytes {
					if g, ok := w.(interface{ Grow(int) }); ok {
						g.Grow(int(want))
					}
				}
			}
		case agentproto.KData:
			n += int64(len(m.Data))
			if n > max {
				return info, n, fmt.Errorf("read %s: more than the %d byte limit", path, max)
			}
			if _, err := w.Write(m.Data); err != nil {
				return info, n, fmt.Errorf("read %s: %w", path, err)
			}
		case agentproto.KEnd:
			s.emit(Event{Type: EventFile, File: &FileEvent{Op: "read", Path: path, Size: n}})
			return info, n, nil
		}
	}
}

// maxListEntries bounds one listing, whatever the agent sends.
const maxListEntries = 100000

// ListFiles lists a directory in the sandbox.
func (s *Sandbox) ListFiles(ctx context.Context, path string) ([]FileInfo, error) {
	st, err := s.open(ctx, agentproto.Request{Op: agentproto.OpListFiles, Path: path})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	c := st.c
	var out []FileInfo
	for {
		var m agentproto.Msg
		if err := s.readReply(ctx, c, &m); err != nil {
			return nil, fmt.Errorf("list %s: %w", path, err)
		}
		switch m.K {
		case agentproto.KList:
			if len(out)+len(m.Files) > maxListEntries {
				return nil, fmt.Errorf("list %s: more than %d entries", path, maxListEntries)
			}
			for _, f := range m.Files {
				out = append(out, fromProto(f))
			}
		case agentproto.KEnd:
			return out, nil
		}
	}
}

// Stat describes path without following a final symlink.
func (s *Sandbox) Stat(ctx context.Context, path string) (FileInfo, error) {
	m, err := s.simple(ctx, agentproto.Request{Op: agentproto.OpStat, Path: path}, "stat")
	if err != nil {
		return FileInfo{}, err
	}
	if m.Info == nil {
		return FileInfo{}, errors.New("stat: agent sent no file info")
	}
	return fromProto(*m.Info), nil
}

// Mkdir creates a directory; with parents, also any missing parents (and
// no error if it exists).
func (s *Sandbox) Mkdir(ctx context.Context, path string, mode fs.FileMode, parents bool) error {
	_, err := s.simple(ctx, agentproto.Request{Op: agentproto.OpMkdir, Path: path, Mode: uint32(mode.Perm()), Recursive: parents}, "mkdir")
	return err
}

// Remove removes a file or empty directory; with recursive, a whole tree.
func (s *Sandbox) Remove(ctx context.Context, path string, recursive bool) error {
	_, err := s.simple(ctx, agentproto.Request{Op: agentproto.OpRemove, Path: path, Recursive: recursive}, "remove")
	if err == nil {
		s.emit(Event{Type: EventFile, File: &FileEvent{Op: "remove", Path: path}})
	}
	return err
}

// Symlink makes path a symbolic link to target, making its missing parent
// directories and replacing a file or link at path (not a directory).
// The target is stored as given, and nothing follows it: it resolves,
// like every path here, inside the sandbox.
func (s *Sandbox) Symlink(ctx context.Context, target, path string) error {
	_, err := s.simple(ctx, agentproto.Request{Op: agentproto.OpSymlink, Path: path, Link: target}, "symlink")
	if err == nil {
		s.emit(Event{Type: EventFile, File: &FileEvent{Op: "symlink", Path: path}})
	}
	return err
}

// FileAttr is what SetAttr changes: the permission bits (Mode.Perm())
// when SetMode, and the modification time when ModTime is not zero.
type FileAttr struct {
	SetMode bool
	Mode    fs.FileMode
	ModTime time.Time
}

// SetAttr changes the permission bits or the modification time of path,
// without following a final symlink (a link keeps its mode, which Linux
// ignores, and gets the time).
func (s *Sandbox) SetAttr(ctx context.Context, path string, attr FileAttr) error {
	req := agentproto.Request{Op: agentproto.OpSetAttr, Path: path, SetMode: attr.SetMode, Mode: uint32(attr.Mode.Perm())}
	if !attr.ModTime.IsZero() {
		req.ModTime = attr.ModTime.UnixNano()
		if req.ModTime == 0 {
			req.ModTime = 1 // the epoch itself; 0 means no change
		}
	}
	_, err := s.simple(ctx, req, "set_attr")
	return err
}

func (s *Sandbox) simple(ctx context.Context, req agentproto.Request, op string) (agentproto.Msg, error) {
	var m agentproto.Msg
	st, err := s.open(ctx, req)
	if err != nil {
		return m, err
	}
	defer st.Close()
	c := st.c
	if err := s.readReply(ctx, c, &m); err != nil {
		return m, fmt.Errorf("%s %s: %w", op, req.Path, err)
	}
	return m, nil
}
