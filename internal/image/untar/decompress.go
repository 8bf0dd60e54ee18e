package untar

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
	xzMagic   = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	bz2Magic  = []byte{'B', 'Z', 'h'}
)

// zstd's window is bounded: a frame may not make the decoder hold more
// than this (zstd --long=27 needs 128 MiB; the default levels far less).
const (
	zstdMaxWindow = 1 << 27
	zstdMaxMemory = 1 << 28
)

// decompress returns the tar stream in br, which is plain, or compressed
// with gzip or zstd (the compressions an OCI layer may have), told apart
// by their magic numbers.
func decompress(br *bufio.Reader) (io.Reader, func(), error) {
	head, err := br.Peek(6)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("read the layer: %w", err)
	}
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("read the layer's gzip header: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	case bytes.HasPrefix(head, zstdMagic):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(zstdMaxMemory))
		if err != nil {
			return nil, nil, fmt.Errorf("read the layer's zstd header: %w", err)
		}
		return zr, zr.Close, nil
	case bytes.HasPrefix(head, xzMagic), bytes.HasPrefix(head, bz2Magic):
		return nil, nil, errors.New("the layer is compressed with xz or bzip2, which OCI images do not use: only gzip, zstd or none")
	}
	return br, func() {}, nil
}
