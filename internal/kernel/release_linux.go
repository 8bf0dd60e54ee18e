package kernel

import "golang.org/x/sys/unix"

// Release is the running kernel's release, or "" when uname fails.
func Release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
