package doctor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/subid"
)

// idsCheck says how many ids a sandbox has inside, and what would give
// it more. Under root each sandbox's ids 0-65535 are a block of host ids
// of its own. An unprivileged user's sandboxes map root to the user and
// ids 1 and up to the user's subordinate ids, which needs ranges in
// /etc/subuid and /etc/subgid and the set-uid helpers newuidmap and
// newgidmap; without them a sandbox has one id, and everything that
// changes to another user inside (chown, su, set-id programs, package
// managers, useradd) fails.
func idsCheck(root string, uid int, lookPath func(string) (string, error)) Check {
	c := Check{Name: "sandbox ids"}
	if uid == 0 {
		c.Status = OK
		c.Detail = "root: each sandbox's ids 0-65535 are a block of 65536 unprivileged host ids of its own, leased in /run/airlock/ids"
		return c
	}
	name := userName(root, uid)
	find := func(helper string) (string, error) {
		path, err := lookPath(helper)
		if err != nil {
			for _, dir := range []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin"} {
				if _, serr := os.Stat(filepath.Join(root, dir, helper)); serr == nil {
					path, err = filepath.Join(dir, helper), nil
					break
				}
			}
		}
		if err != nil {
			return "", fmt.Errorf("%s is not installed", helper)
		}
		if err := subid.HelperUsable(filepath.Join(root, path)); err != nil {
			return "", err
		}
		return path, nil
	}
	ids, err := subid.LookupWith(uid, name, filepath.Join(root, subid.SubUIDFile), filepath.Join(root, subid.SubGIDFile), find)
	if err != nil {
		c.Status = Warn
		c.Detail = fmt.Sprintf("%v: a sandbox has one uid and one gid inside (root, which is uid %d on the host), so chown to another user, su, set-id programs, useradd and packages that add users fail inside, and every file of an image pulled without root is yours", err, uid)
		var m *subid.Missing
		if errors.As(err, &m) {
			c.Detail = fmt.Sprintf("%s: a sandbox has one uid and one gid inside (root, which is uid %d on the host), so chown to another user, su, set-id programs, useradd and packages that add users fail inside, and every file of an image pulled without root is yours", m.Why, uid)
			c.Fix = m.Fix
		}
		return c
	}
	c.Status = OK
	c.Detail = fmt.Sprintf("user %s: a sandbox's root is uid %d and its ids 1-%d are the subordinate uids %d-%d and gids %d-%d (mapped by %s and %s); all of this user's sandboxes share them, and images pulled by this user keep their files' owners through them",
		name, uid, ids.UID.Count, ids.UID.First, ids.UID.End()-1, ids.GID.First, ids.GID.End()-1, ids.UIDHelper, ids.GIDHelper)
	return c
}

// userName is the name of uid in root's /etc/passwd, or the number.
func userName(root string, uid int) string {
	f, err := os.Open(filepath.Join(root, "/etc/passwd"))
	if err != nil {
		return strconv.Itoa(uid)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) > 2 && fields[2] == strconv.Itoa(uid) {
			return fields[0]
		}
	}
	return strconv.Itoa(uid)
}
