package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// The agent's root is the sandbox's root, so paths need no rebasing here;
// they must still be absolute and clean so a relative path never resolves
// against the agent's working directory by accident.
func cleanPath(p string) (string, error) {
	if p == "" || !filepath.IsAbs(p) {
		return "", agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("path %q must be absolute", p))
	}
	return filepath.Clean(p), nil
}

func replyErr(c *agentproto.Conn, err error) error {
	return c.Write(agentproto.Msg{K: agentproto.KErr, Err: agentproto.ToError(err)})
}

func writeFile(c *agentproto.Conn, req *agentproto.Request) error {
	p, err := cleanPath(req.Path)
	if err != nil {
		return replyErr(c, err)
	}
	mode := os.FileMode(req.Mode & 0o7777)
	if mode == 0 {
		mode = 0o644
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return replyErr(c, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".airlock-write-*")
	if err != nil {
		return replyErr(c, err)
	}
	// fail removes the partial file before answering, so the space is
	// free again by the time the host sees the error.
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return replyErr(c, err)
	}
	for {
		var m agentproto.Msg
		if err := c.Read(&m); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return fmt.Errorf("read file data: %w", err)
		}
		if m.K == agentproto.KEnd {
			break
		}
		if m.K != agentproto.KData {
			return fail(agentproto.Errorf(agentproto.CodeInvalid, "unexpected frame in file upload"))
		}
		if _, err := tmp.Write(m.Data); err != nil {
			return fail(err)
		}
	}
	if err := tmp.Chmod(mode); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return replyErr(c, err)
	}
	return c.Write(agentproto.Msg{K: agentproto.KEnd})
}

func readFile(c *agentproto.Conn, req *agentproto.Request) error {
	p, err := cleanPath(req.Path)
	if err != nil {
		return replyErr(c, err)
	}
	f, err := openNoMagic(p)
	if err != nil {
		return replyErr(c, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return replyErr(c, err)
	}
	if fi.IsDir() {
		return replyErr(c, agentproto.Errorf(agentproto.CodeIsDir, p+" is a directory"))
	}
	if req.MaxBytes > 0 && fi.Size() > req.MaxBytes {
		return replyErr(c, agentproto.Errorf(agentproto.CodeTooLarge, fmt.Sprintf("%s is %d bytes, more than the %d byte limit", p, fi.Size(), req.MaxBytes)))
	}
	info := fileInfo(fi)
	if err := c.Write(agentproto.Msg{K: agentproto.KInfo, Info: &info}); err != nil {
		return err
	}
	buf := make([]byte, agentproto.ChunkSize)
	var sent int64
	for {
		n, err := f.Read(buf)
		if n > 0 {
			sent += int64(n)
			if req.MaxBytes > 0 && sent > req.MaxBytes {
				return replyErr(c, agentproto.Errorf(agentproto.CodeTooLarge, fmt.Sprintf("%s grew past the %d byte limit while being read", p, req.MaxBytes)))
			}
			if werr := c.Write(agentproto.Msg{K: agentproto.KData, Data: buf[:n]}); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return c.Write(agentproto.Msg{K: agentproto.KEnd})
		}
		if err != nil {
			return replyErr(c, err)
		}
	}
}

func fileInfo(fi os.FileInfo) agentproto.FileInfo {
	return agentproto.FileInfo{
		Name:    fi.Name(),
		Size:    fi.Size(),
		Mode:    uint32(fi.Mode()),
		ModTime: fi.ModTime().UnixNano(),
		IsDir:   fi.IsDir(),
	}
}

// maxList bounds one directory listing.
const maxList = 100000

func listFiles(c *agentproto.Conn, req *agentproto.Request) error {
	p, err := cleanPath(req.Path)
	if err != nil {
		return replyErr(c, err)
	}
	d, err := os.Open(p)
	if err != nil {
		return replyErr(c, err)
	}
	defer d.Close()
	ents, err := d.ReadDir(maxList)
	if err != nil && !errors.Is(err, io.EOF) {
		return replyErr(c, err)
	}
	if len(ents) == maxList {
		if more, _ := d.ReadDir(1); len(more) > 0 {
			return replyErr(c, agentproto.Errorf(agentproto.CodeTooLarge, fmt.Sprintf("%s has more than %d entries; list a narrower directory", p, maxList)))
		}
	}
	// Send in batches so one frame stays under the frame limit.
	const batch = 512
	for i := 0; i < len(ents); i += batch {
		j := min(i+batch, len(ents))
		out := make([]agentproto.FileInfo, 0, j-i)
		for _, e := range ents[i:j] {
			fi, err := e.Info()
			if err != nil {
				continue // removed while listing
			}
			info := fileInfo(fi)
			if fi.Mode()&os.ModeSymlink != 0 {
				info.Link, _ = os.Readlink(filepath.Join(p, e.Name()))
			}
			out = append(out, info)
		}
		if err := c.Write(agentproto.Msg{K: agentproto.KList, Files: out}); err != nil {
			return err
		}
	}
	return c.Write(agentproto.Msg{K: agentproto.KEnd})
}

func statFile(c *agentproto.Conn, req *agentproto.Request) error {
	p, err := cleanPath(req.Path)
	if err != nil {
		return replyErr(c, err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return replyErr(c, err)
	}
	info := fileInfo(fi)
	info.Name = p
	if fi.Mode()&os.ModeSymlink != 0 {
		info.Link, _ = os.Readlink(p)
	}
	return c.Write(agentproto.Msg{K: agentproto.KInfo, Info: &info})
}

func mkdir(c *agentproto.Conn, req *agentproto.Request) error {
	p, err := cleanPath(req.Path)
	if err != nil {
		return replyErr(c, err)
	}
	mode := os.FileMode(req.Mode & 0o7777)
	if mode == 0 {
		mode = 0o755
	}
	if req.Recursive {
		err = os.MkdirAll(p, mode)
	} else {
		err = os.Mkdir(p, mode)
	}
	if err != nil {
		return replyErr(c, err)
	}
	return c.Write(agentproto.Msg{K: agentproto.KEnd})
}

func remove(c *agentproto.Conn, req *agentproto.Request) error {
	p, err := cleanPath(req.Path)
	if err != nil {
		return replyErr(c, err)
	}
	if p == "/" {
		return replyErr(c, agentproto.Errorf(agentproto.CodeInvalid, "refusing to remove /"))
	}
	if req.Recursive {
		if _, err := os.Lstat(p); err != nil {
			return replyErr(c, err)
		}
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	if err != nil {
		return replyErr(c, err)
	}
	return c.Write(agentproto.Msg{K: agentproto.KEnd})
}
