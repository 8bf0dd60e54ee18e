package agent

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Cred is who a command runs as inside the sandbox.
type Cred struct {
	UID, GID uint32
	Groups   []uint32
	// Name and Home are from /etc/passwd; empty and "/" for an id it
	// does not list.
	Name, Home string
}

// Bounds on the account files read to resolve a user: they belong to
// the sandbox, which may make them as large as it likes.
const (
	maxAccountFile  = 4 << 20
	maxAccountLine  = 64 << 10
	maxGroupsOfUser = 64
	// maxID is the largest id a sandbox maps.
	maxID = 65535
)

// passwdEntry is a line of /etc/passwd.
type passwdEntry struct {
	name     string
	uid, gid uint32
	home     string
}

// groupEntry is a line of /etc/group.
type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

// resolveUser resolves spec, as docker's --user takes it (user, uid,
// user:group, uid:gid, or mixed), against the sandbox's passwd and group
// files (either may be nil: a sandbox without them). A name must be
// listed; a number need not be. The supplementary groups are those
// group lists the user in.
func resolveUser(spec string, passwd, group io.Reader) (Cred, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	if userPart == "" || hasGroup && groupPart == "" {
		return Cred{}, fmt.Errorf("user %q: give USER, UID, USER:GROUP or UID:GID", spec)
	}
	users, err := readPasswd(passwd)
	if err != nil {
		return Cred{}, fmt.Errorf("user %q: read /etc/passwd: %w", spec, err)
	}
	c := Cred{Home: "/"}
	found := false
	if uid, ok := parseID(userPart); ok {
		c.UID = uid
		for _, u := range users {
			if u.uid == uid {
				c.GID, c.Name, c.Home, found = u.gid, u.name, u.home, true
				break
			}
		}
	} else {
		for _, u := range users {
			if u.name == userPart {
				c.UID, c.GID, c.Name, c.Home, found = u.uid, u.gid, u.name, u.home, true
				break
			}
		}
		if !found {
			return Cred{}, fmt.Errorf("user %q is not in the sandbox's /etc/passwd", userPart)
		}
	}
	groups, err := readGroup(group)
	if err != nil {
		return Cred{}, fmt.Errorf("user %q: read /etc/group: %w", spec, err)
	}
	if hasGroup {
		if gid, ok := parseID(groupPart); ok {
			c.GID = gid
		} else {
			ok := false
			for _, g := range groups {
				if g.name == groupPart {
					c.GID, ok = g.gid, true
					break
				}
			}
			if !ok {
				return Cred{}, fmt.Errorf("group %q is not in the sandbox's /etc/group", groupPart)
			}
		}
	}
	c.Groups = []uint32{c.GID}
	if c.Name != "" {
		for _, g := range groups {
			if len(c.Groups) >= maxGroupsOfUser {
				break
			}
			for _, m := range g.members {
				if m == c.Name && g.gid != c.GID {
					c.Groups = append(c.Groups, g.gid)
					break
				}
			}
		}
	}
	if c.Home == "" {
		c.Home = "/"
	}
	return c, nil
}

// parseID reads a decimal id that a sandbox maps.
func parseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > maxID {
		return 0, false
	}
	return uint32(n), true
}

// accountLines calls f with the fields of each line of r, at most
// maxAccountFile bytes of it; lines that are too long, comments and
// blank lines are skipped.
func accountLines(r io.Reader, f func(fields []string)) error {
	if r == nil {
		return nil
	}
	sc := bufio.NewScanner(io.LimitReader(r, maxAccountFile))
	sc.Buffer(make([]byte, 4096), maxAccountLine)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f(strings.Split(line, ":"))
	}
	if err := sc.Err(); err != nil && err != bufio.ErrTooLong {
		return err
	}
	return nil
}

func readPasswd(r io.Reader) ([]passwdEntry, error) {
	var out []passwdEntry
	err := accountLines(r, func(f []string) {
		if len(f) < 7 {
			return
		}
		uid, ok1 := parseID(f[2])
		gid, ok2 := parseID(f[3])
		if f[0] == "" || !ok1 || !ok2 {
			return
		}
		out = append(out, passwdEntry{name: f[0], uid: uid, gid: gid, home: f[5]})
	})
	return out, err
}

func readGroup(r io.Reader) ([]groupEntry, error) {
	var out []groupEntry
	err := accountLines(r, func(f []string) {
		if len(f) < 4 {
			return
		}
		gid, ok := parseID(f[2])
		if f[0] == "" || !ok {
			return
		}
		g := groupEntry{name: f[0], gid: gid}
		if f[3] != "" {
			g.members = strings.Split(f[3], ",")
		}
		out = append(out, g)
	})
	return out, err
}
