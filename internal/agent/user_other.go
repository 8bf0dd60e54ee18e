//go:build !linux

package agent

import "errors"

// credFor is Linux's: only there do commands run as other users.
func (s *server) credFor(spec string) (Cred, error) {
	return Cred{}, errors.New("running a command as another user needs Linux")
}
