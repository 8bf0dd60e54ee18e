package agent

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// file serves one file operation.
func (s *server) file(c *agentproto.Conn, req *agentproto.Request) error {
	p, err := cleanPath(req.Path)
	if err != nil {
		return replyFileErr(c, p, err)
	}
	switch req.Op {
	case agentproto.OpWriteFile:
		return s.writeFile(c, p, req)
	case agentproto.OpReadFile:
		return s.readFile(c, p, req)
	case agentproto.OpListFiles:
		return s.listFiles(c, p)
	case agentproto.OpStat:
		info, err := s.fs.stat(p)
		if err != nil {
			return replyFileErr(c, p, err)
		}
		info.Name = p
		return c.Write(agentproto.Msg{K: agentproto.KInfo, Info: &info})
	case agentproto.OpMkdir:
		mode := req.Mode & 0o777
		if mode == 0 {
			mode = 0o755
		}
		err = s.fs.mkdir(p, mode, req.Recursive)
	case agentproto.OpRemove:
		err = s.fs.remove(p, req.Recursive)
	case agentproto.OpSymlink:
		err = s.fs.symlink(p, req.Link)
	case agentproto.OpSetAttr:
		err = s.fs.setAttr(p, req.SetMode, req.Mode&0o777, req.ModTime)
	default:
		err = agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("unknown operation %q", req.Op))
	}
	if err != nil {
		return replyFileErr(c, p, err)
	}
	return c.Write(agentproto.Msg{K: agentproto.KEnd})
}

func (s *server) writeFile(c *agentproto.Conn, p string, req *agentproto.Request) error {
	mode := req.Mode & 0o777
	if mode == 0 {
		mode = 0o644
	}
	if req.Offset < 0 {
		return replyFileErr(c, p, agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("write %s: negative offset %d", p, req.Offset)))
	}
	if req.InPlace {
		return s.writeInPlace(c, p, mode, req)
	}
	u, err := s.fs.create(p)
	if err != nil {
		return replyFileErr(c, p, err)
	}
	// fail removes the partial file before answering, so the space is
	// free again by the time the host sees the error.
	fail := func(err error) error {
		u.abort()
		return replyFileErr(c, p, err)
	}
	for {
		var m agentproto.Msg
		if err := c.Read(&m); err != nil {
			u.abort()
			return fmt.Errorf("read file data: %w", err)
		}
		if m.K == agentproto.KEnd {
			break
		}
		if m.K != agentproto.KData {
			return fail(agentproto.Errorf(agentproto.CodeInvalid, "unexpected frame in file upload"))
		}
		if _, err := u.Write(m.Data); err != nil {
			return fail(err)
		}
	}
	if err := u.commit(mode); err != nil {
		return replyFileErr(c, p, err)
	}
	return c.Write(agentproto.Msg{K: agentproto.KEnd})
}

// writeInPlace writes the upload into p at req.Offset, without replacing
// the file: the parts it does not cover stay, and it is cut where the
// write ends only with req.Truncate.
func (s *server) writeInPlace(c *agentproto.Conn, p string, mode uint32, req *agentproto.Request) error {
	f, err := s.fs.openWrite(p, mode)
	if err != nil {
		return replyFileErr(c, p, err)
	}
	defer f.Close()
	off := req.Offset
	for {
		var m agentproto.Msg
		if err := c.Read(&m); err != nil {
			return fmt.Errorf("read file data: %w", err)
		}
		if m.K == agentproto.KEnd {
			break
		}
		if m.K != agentproto.KData {
			return replyFileErr(c, p, agentproto.Errorf(agentproto.CodeInvalid, "unexpected frame in file upload"))
		}
		n, err := f.WriteAt(m.Data, off)
		off += int64(n)
		if err != nil {
			return replyFileErr(c, p, err)
		}
	}
	if req.Truncate {
		if err := f.Truncate(off); err != nil {
			return replyFileErr(c, p, err)
		}
	}
	return c.Write(agentproto.Msg{K: agentproto.KEnd})
}

func (s *server) readFile(c *agentproto.Conn, p string, req *agentproto.Request) error {
	if req.Offset < 0 || req.Length < 0 {
		return replyFileErr(c, p, agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("read %s: negative offset or length", p)))
	}
	f, info, err := s.fs.open(p)
	if err != nil {
		return replyFileErr(c, p, err)
	}
	defer f.Close()
	// want is what this read sends, as the file is now.
	want := max(info.Size-req.Offset, 0)
	limit := int64(math.MaxInt64 - req.Offset)
	if req.Length > 0 {
		want = min(want, req.Length)
		limit = min(limit, req.Length)
	}
	if req.MaxBytes > 0 && want > req.MaxBytes {
		if req.Offset > 0 || req.Length > 0 {
			return replyFileErr(c, p, agentproto.Errorf(agentproto.CodeTooLarge, fmt.Sprintf("%s has %d bytes from offset %d, more than the %d byte limit", p, want, req.Offset, req.MaxBytes)))
		}
		return replyFileErr(c, p, agentproto.Errorf(agentproto.CodeTooLarge, fmt.Sprintf("%s is %d bytes, more than the %d byte limit", p, info.Size, req.MaxBytes)))
	}
	if err := c.Write(agentproto.Msg{K: agentproto.KInfo, Info: &info}); err != nil {
		return err
	}
	r := io.NewSectionReader(f, req.Offset, limit)
	buf := make([]byte, agentproto.ChunkSize)
	var sent int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			sent += int64(n)
			if req.MaxBytes > 0 && sent > req.MaxBytes {
				return replyFileErr(c, p, agentproto.Errorf(agentproto.CodeTooLarge, fmt.Sprintf("%s grew past the %d byte limit while being read", p, req.MaxBytes)))
			}
			if werr := c.Write(agentproto.Msg{K: agentproto.KData, Data: buf[:n]}); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return c.Write(agentproto.Msg{K: agentproto.KEnd})
		}
		if err != nil {
			return replyFileErr(c, p, err)
		}
	}
}

func (s *server) listFiles(c *agentproto.Conn, p string) error {
	ents, err := s.fs.list(p)
	if err != nil {
		return replyFileErr(c, p, err)
	}
	// Send in batches so one frame stays under the frame limit.
	const batch = 512
	for i := 0; i < len(ents); i += batch {
		if err := c.Write(agentproto.Msg{K: agentproto.KList, Files: ents[i:min(i+batch, len(ents))]}); err != nil {
			return err
		}
	}
	return c.Write(agentproto.Msg{K: agentproto.KEnd})
}
