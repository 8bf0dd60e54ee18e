//go:build !linux && !darwin

package vfs

import "os"

func statSys(fi *FileInfo, sys any) {}

func statfsRoot(r *os.Root) (StatFS, error) { return StatFS{}, nil }
