//go:build darwin

package vfs

import (
	"os"
	"syscall"
	"time"
)

func statSys(fi *FileInfo, sys any) {
	st, ok := sys.(*syscall.Stat_t)
	if !ok {
		return
	}
	fi.ATime = time.Unix(st.Atimespec.Unix())
	fi.CTime = time.Unix(st.Ctimespec.Unix())
	fi.UID, fi.GID = st.Uid, st.Gid
	fi.Nlink = uint32(st.Nlink)
	fi.Ino = st.Ino
	fi.Blocks = st.Blocks
}

func statfsRoot(r *os.Root) (StatFS, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(r.Name(), &st); err != nil {
		return StatFS{}, err
	}
	bs := uint64(st.Bsize)
	return StatFS{
		TotalBytes: st.Blocks * bs, FreeBytes: st.Bfree * bs,
		ReservedBytes: (st.Bfree - min(st.Bavail, st.Bfree)) * bs,
		TotalFiles:    st.Files, FreeFiles: st.Ffree,
	}, nil
}
