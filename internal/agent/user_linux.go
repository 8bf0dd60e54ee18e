package agent

import (
	"errors"
	"io"
	"os"
)

// credFor resolves a user spec against the sandbox's own account files,
// opened as the file API opens a path (inside the sandbox's root, no
// magic links, regular files only): they are the sandbox's to change.
func (s *server) credFor(spec string) (Cred, error) {
	open := func(p string) (io.ReadCloser, error) {
		f, _, err := s.fs.open(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, nil
			}
			return nil, err
		}
		return f, nil
	}
	passwd, err := open("/etc/passwd")
	if err != nil {
		return Cred{}, err
	}
	group, err := open("/etc/group")
	if err != nil {
		if passwd != nil {
			passwd.Close()
		}
		return Cred{}, err
	}
	var pr, gr io.Reader
	if passwd != nil {
		defer passwd.Close()
		pr = passwd
	}
	if group != nil {
		defer group.Close()
		gr = group
	}
	return resolveUser(spec, pr, gr)
}
