package vfsproto

import (
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/vfs"
)

// checkPath refuses a path that is not absolute and clean ("/" or "/a/b":
// no empty, "." or ".." names, no trailing slash), that holds a NUL, or
// that is longer than MaxPath, deeper than MaxDepth or has a name longer
// than MaxName.
func checkPath(p string) error {
	_, err := vfs.CleanPath(p)
	return err
}

// checkName refuses a name that a directory cannot hold.
func checkName(name string) error {
	switch {
	case name == "", name == ".", name == "..", strings.IndexByte(name, 0) >= 0:
		return syscall.EINVAL
	case len(name) > MaxName:
		return syscall.ENAMETOOLONG
	case strings.IndexByte(name, '/') >= 0:
		return syscall.EINVAL
	}
	return nil
}

// checkTarget refuses a symlink target that is empty, holds a NUL or is
// longer than MaxTarget.
func checkTarget(t string) error {
	switch {
	case len(t) > MaxTarget:
		return syscall.ENAMETOOLONG
	case t == "", strings.IndexByte(t, 0) >= 0:
		return syscall.EINVAL
	}
	return nil
}

// Linux's st_mode bits.
const (
	sIFMT   = 0o170000
	sIFSOCK = 0o140000
	sIFLNK  = 0o120000
	sIFREG  = 0o100000
	sIFBLK  = 0o060000
	sIFDIR  = 0o040000
	sIFCHR  = 0o020000
	sIFIFO  = 0o010000
	sISUID  = 0o4000
	sISGID  = 0o2000
	sISVTX  = 0o1000
)

// linuxMode is m as Linux's st_mode.
func linuxMode(m fs.FileMode) uint32 {
	r := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		r |= sISUID
	}
	if m&fs.ModeSetgid != 0 {
		r |= sISGID
	}
	if m&fs.ModeSticky != 0 {
		r |= sISVTX
	}
	switch {
	case m&fs.ModeDir != 0:
		r |= sIFDIR
	case m&fs.ModeSymlink != 0:
		r |= sIFLNK
	case m&fs.ModeNamedPipe != 0:
		r |= sIFIFO
	case m&fs.ModeSocket != 0:
		r |= sIFSOCK
	case m&fs.ModeCharDevice != 0:
		r |= sIFCHR
	case m&fs.ModeDevice != 0:
		r |= sIFBLK
	default:
		r |= sIFREG
	}
	return r
}

// fileMode is Linux's st_mode m as an fs.FileMode; bits beyond the type,
// permissions, set-id and sticky bits are ignored.
func fileMode(m uint32) fs.FileMode {
	r := fs.FileMode(m & 0o777)
	if m&sISUID != 0 {
		r |= fs.ModeSetuid
	}
	if m&sISGID != 0 {
		r |= fs.ModeSetgid
	}
	if m&sISVTX != 0 {
		r |= fs.ModeSticky
	}
	switch m & sIFMT {
	case sIFDIR:
		r |= fs.ModeDir
	case sIFLNK:
		r |= fs.ModeSymlink
	case sIFIFO:
		r |= fs.ModeNamedPipe
	case sIFSOCK:
		r |= fs.ModeSocket
	case sIFCHR:
		r |= fs.ModeDevice | fs.ModeCharDevice
	case sIFBLK:
		r |= fs.ModeDevice
	}
	return r
}

// mknodMode checks mknod's Linux mode m (a type, permissions, set-id and
// sticky bits, nothing else) and returns it as an fs.FileMode: a FIFO's
// or a socket's; a device's type is EPERM, any other EINVAL.
func mknodMode(m uint32) (fs.FileMode, error) {
	if m&^(sIFMT|0o7777) != 0 {
		return 0, syscall.EINVAL
	}
	switch m & sIFMT {
	case sIFIFO, sIFSOCK:
		return fileMode(m), nil
	case sIFCHR, sIFBLK:
		return 0, syscall.EPERM
	}
	return 0, syscall.EINVAL
}

// Linux's open flags that providers understand.
const (
	lRDONLY = 0o0
	lWRONLY = 0o1
	lRDWR   = 0o2
	lCREAT  = 0o100
	lEXCL   = 0o200
	lTRUNC  = 0o1000
	lAPPEND = 0o2000
	lSYNC   = 0o4010000
)

// linuxFlags is the os.O_* flags f with Linux's values; flags that
// providers do not act on are left out.
func linuxFlags(f int) uint32 {
	var r uint32
	switch f & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR) {
	case os.O_WRONLY:
		r = lWRONLY
	case os.O_RDWR:
		r = lRDWR
	}
	for _, b := range [...]struct {
		os int
		l  uint32
	}{{os.O_CREATE, lCREAT}, {os.O_EXCL, lEXCL}, {os.O_TRUNC, lTRUNC}, {os.O_APPEND, lAPPEND}, {os.O_SYNC, lSYNC}} {
		if f&b.os != 0 {
			r |= b.l
		}
	}
	return r
}

// osFlags is Linux's open flags f as os.O_* flags. Flags that providers
// do not act on (O_CLOEXEC, O_NONBLOCK, O_LARGEFILE and the like) are
// dropped; an access mode of 3 is EINVAL.
func osFlags(f uint32) (int, error) {
	var r int
	switch f & 3 {
	case lRDONLY:
		r = os.O_RDONLY
	case lWRONLY:
		r = os.O_WRONLY
	case lRDWR:
		r = os.O_RDWR
	default:
		return 0, syscall.EINVAL
	}
	for _, b := range [...]struct {
		os int
		l  uint32
	}{{os.O_CREATE, lCREAT}, {os.O_EXCL, lEXCL}, {os.O_TRUNC, lTRUNC}, {os.O_APPEND, lAPPEND}} {
		if f&b.l != 0 {
			r |= b.os
		}
	}
	if f&lSYNC == lSYNC {
		r |= os.O_SYNC
	}
	return r, nil
}

func toWireTime(t time.Time) *wireTime {
	if t.IsZero() {
		return nil
	}
	return &wireTime{Sec: t.Unix(), Nsec: int64(t.Nanosecond())}
}

// fromWireTime is t as a time; nil is the zero time. A nanosecond count
// outside [0, 1e9) is EINVAL.
func fromWireTime(t *wireTime) (time.Time, error) {
	if t == nil {
		return time.Time{}, nil
	}
	if t.Nsec < 0 || t.Nsec >= 1e9 {
		return time.Time{}, syscall.EINVAL
	}
	return time.Unix(t.Sec, t.Nsec), nil
}

func toWireInfo(fi vfs.FileInfo) wireInfo {
	return wireInfo{
		Name:   fi.Name,
		Size:   fi.Size,
		Mode:   linuxMode(fi.Mode),
		MTime:  toWireTime(fi.ModTime),
		ATime:  toWireTime(fi.ATime),
		CTime:  toWireTime(fi.CTime),
		UID:    fi.UID,
		GID:    fi.GID,
		Nlink:  fi.Nlink,
		Ino:    fi.Ino,
		Blocks: fi.Blocks,
	}
}

// fromWireInfo is w as a vfs.FileInfo; bad times become the zero time.
func fromWireInfo(w *wireInfo) vfs.FileInfo {
	mt, _ := fromWireTime(w.MTime)
	at, _ := fromWireTime(w.ATime)
	ct, _ := fromWireTime(w.CTime)
	return vfs.FileInfo{
		Name:    w.Name,
		Size:    w.Size,
		Mode:    fileMode(w.Mode),
		ModTime: mt,
		ATime:   at,
		CTime:   ct,
		UID:     w.UID,
		GID:     w.GID,
		Nlink:   w.Nlink,
		Ino:     w.Ino,
		Blocks:  w.Blocks,
	}
}

// entrySize is a bound on the encoded size of one directory entry.
func entrySize(name string) int { return len(name) + 128 }
