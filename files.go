package airlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
// directories. The file is replaced atomically.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	return s.WriteFileFrom(ctx, path, bytes.NewReader(data), mode)
}

// WriteFileFrom streams r into path inside the sandbox.
func (s *Sandbox) WriteFileFrom(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	st, err := s.open(ctx, agentproto.Request{Op: agentproto.OpWriteFile, Path: path, Mode: uint32(mode.Perm())})
	if err != nil {
		return err
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
		return fmt.Errorf("write %s: %w", path, sendErr)
	}
	if err := <-reply; err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if sendErr != nil {
		return fmt.Errorf("write %s: %w", path, sendErr)
	}
	s.emit(Event{Type: EventFile, File: &FileEvent{Op: "write", Path: path, Size: n}})
	return nil
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
	st, err := s.open(ctx, agentproto.Request{Op: agentproto.OpReadFile, Path: path, MaxBytes: max})
	if err != nil {
		return FileInfo{}, err
	}
	defer st.Close()
	c := st.c
	var info FileInfo
	var n int64
	for {
		var m agentproto.Msg
		if err := s.readReply(ctx, c, &m); err != nil {
			return info, fmt.Errorf("read %s: %w", path, err)
		}
		switch m.K {
		case agentproto.KInfo:
			if m.Info != nil {
				info = fromProto(*m.Info)
				// Size the destination once rather than growing it
				// frame by frame (bytes.Buffer and the like).
				if g, ok := w.(interface{ Grow(int) }); ok && info.Size > 0 && info.Size <= max {
					g.Grow(int(info.Size))
				}
			}
		case agentproto.KData:
			n += int64(len(m.Data))
			if n > max {
				return info, fmt.Errorf("read %s: more than the %d byte limit", path, max)
			}
			if _, err := w.Write(m.Data); err != nil {
				return info, fmt.Errorf("read %s: %w", path, err)
			}
		case agentproto.KEnd:
			s.emit(Event{Type: EventFile, File: &FileEvent{Op: "read", Path: path, Size: n}})
			return info, nil
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
