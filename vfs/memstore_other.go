//go:build !linux

package vfs

// newPageStore makes a heap store: only Linux has memfds.
func newPageStore() pageStore { return newHeapStore() }
