// Package vfsproto carries vfs.Provider operations between the sandbox's
// FUSE daemon (the client, in the guest) and the host's providers (the
// server) over one byte stream.
//
// # Frames
//
// Every message is a frame: a 4-byte big-endian length, then that many
// bytes of body, never more than MaxFrame. A body is one CBOR map (a
// request or a response header) followed by the raw bytes of its payload,
// if it has one: the data of a write request or of a read response. The
// payload is not CBOR, so that data is copied as few times as possible;
// its length is whatever of the body the header leaves.
//
// # Requests and responses
//
// A request carries a non-zero id chosen by the client, an op and the
// caller (uid, gid, pid) that the server hands to the provider with
// vfs.WithCaller, in a context marked vfs.OriginSandbox. Many requests may be in flight at once; each response
// carries its request's id, and responses come in any order. Errors are
// Linux errno numbers, whatever the host.
//
// The server sends two kinds of frame of its own, with id 0: a greeting
// when the connection starts (the protocol version, whether the
// provider is read-only, and beneath which paths it reports every change
// the client does not make itself), and invalidations: a path that changed on the
// host, below which the client drops what it has cached. Invalidations
// that come faster than the client takes them are coalesced into one of
// "/".
//
// A directory is listed a page at a time: a page starts at a cursor (0,
// then the page before's next) and holds what fits in its bounds. The
// server keeps a few listings between pages while no names change.
//
// A client whose caller gives up sends an interrupt naming the request;
// the server cancels that request's context, and the provider may or may
// not stop early. The interrupted request still gets a response, which
// the client drops.
//
// # Bounds
//
// A path is at most MaxPath bytes and MaxDepth names, and each of its
// names at most MaxName; a symlink's target at most MaxTarget. Mknod makes FIFOs and sockets only:
// a device's type is EPERM, any other EINVAL, and no device number
// travels. A read or a write moves at most
// MaxData bytes; a directory page holds at most MaxPageEntries entries and
// MaxPageBytes bytes of names. A connection has at most MaxInflight
// requests executing (the server stops reading beyond that) and at most
// MaxHandles open handles (EMFILE beyond that).
package vfsproto

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock/vfs"
	"github.com/fxamacker/cbor/v2"
)

// Version is the protocol version the server announces in its greeting.
const Version = 1

// Bounds of the protocol.
const (
	// MaxPath bounds a path in bytes, and MaxDepth its names: a path is
	// the whole path from the provider's root, which may be longer than
	// the one a system call in the sandbox was given.
	MaxPath  = vfs.MaxPath
	MaxDepth = vfs.MaxDepth
	// MaxName bounds one name in a path, as Linux's NAME_MAX.
	MaxName = vfs.MaxName
	// MaxTarget bounds a symlink's target.
	MaxTarget = vfs.MaxTarget
	// MaxData bounds the bytes of one read or write request.
	MaxData = 1 << 20
	// MaxPageEntries bounds the entries of one directory page.
	MaxPageEntries = 1024
	// MaxPageBytes bounds the encoded size of one directory page.
	MaxPageBytes = 256 << 10
	// MaxInflight bounds the requests that execute at once on one
	// connection.
	MaxInflight = 256
	// MaxHandles bounds the open handles of one connection.
	MaxHandles = 4096
	// MaxFrame bounds the body of a frame: MaxData of payload and room
	// for its header, or a directory page.
	MaxFrame = MaxData + 64<<10
)

// Ops.
const (
	opStat uint8 = iota + 1
	opReaddir
	opOpen
	opCreate
	opMkdir
	opRemove
	opRename
	opSymlink
	opReadlink
	opLink
	opChmod
	opChown
	opTruncate
	opUtimens
	opStatfs
	opRead
	opWrite
	opFstat
	opFtruncate
	opFsync
	opClose
	// opInterrupt cancels the request Target; it has no response.
	opInterrupt
	// opMknod makes a FIFO or a socket: Mode holds its type too. Ops
	// added later come after the others, so that every op keeps its
	// number.
	opMknod
	opMax
)

func opName(op uint8) string {
	switch op {
	case opStat:
		return "stat"
	case opReaddir:
		return "readdir"
	case opOpen:
		return "open"
	case opCreate:
		return "create"
	case opMkdir:
		return "mkdir"
	case opRemove:
		return "remove"
	case opRename:
		return "rename"
	case opSymlink:
		return "symlink"
	case opReadlink:
		return "readlink"
	case opLink:
		return "link"
	case opChmod:
		return "chmod"
	case opChown:
		return "chown"
	case opTruncate:
		return "truncate"
	case opUtimens:
		return "utimens"
	case opStatfs:
		return "statfs"
	case opRead:
		return "read"
	case opWrite:
		return "write"
	case opFstat:
		return "fstat"
	case opFtruncate:
		return "ftruncate"
	case opFsync:
		return "fsync"
	case opClose:
		return "close"
	case opInterrupt:
		return "interrupt"
	case opMknod:
		return "mknod"
	}
	return fmt.Sprintf("op%d", op)
}

// Kinds of server frame.
const (
	kindResponse uint8 = iota
	kindHello
	kindInvalidate
)

// wireTime is a time as seconds and nanoseconds since the Unix epoch.
type wireTime struct {
	_    struct{} `cbor:",toarray"`
	Sec  int64
	Nsec int64
}

// request is the header of a request frame.
type request struct {
	ID  uint64 `cbor:"1,keyasint,omitempty"`
	Op  uint8  `cbor:"2,keyasint,omitempty"`
	UID uint32 `cbor:"3,keyasint,omitempty"`
	GID uint32 `cbor:"4,keyasint,omitempty"`
	PID uint32 `cbor:"5,keyasint,omitempty"`
	// Path is the path operated on; for symlink, the link made.
	Path string `cbor:"6,keyasint,omitempty"`
	// Path2 is rename's and link's new path.
	Path2 string `cbor:"7,keyasint,omitempty"`
	// Target is a symlink's target.
	Target string `cbor:"8,keyasint,omitempty"`
	// Flags are open's flags, with Linux's values.
	Flags uint32 `cbor:"9,keyasint,omitempty"`
	// Mode holds Linux mode bits (permissions, set-id and sticky), and
	// for mknod the file's type (S_IFIFO or S_IFSOCK) too.
	Mode uint32 `cbor:"10,keyasint,omitempty"`
	// Owner and Group are chown's ids, -1 to keep one.
	Owner int64 `cbor:"11,keyasint,omitempty"`
	Group int64 `cbor:"12,keyasint,omitempty"`
	// Size is truncate's size; Off a read's or write's offset.
	Size int64 `cbor:"13,keyasint,omitempty"`
	Off  int64 `cbor:"14,keyasint,omitempty"`
	// Len is the bytes a read asks for.
	Len uint32 `cbor:"15,keyasint,omitempty"`
	// Handle names an open handle of the connection.
	Handle uint64 `cbor:"16,keyasint,omitempty"`
	// ATime and MTime are utimens' times, absent to keep one.
	ATime *wireTime `cbor:"17,keyasint,omitempty"`
	MTime *wireTime `cbor:"18,keyasint,omitempty"`
	// Cursor is where a directory page starts; Count and Bytes bound it.
	Cursor uint64 `cbor:"19,keyasint,omitempty"`
	Count  uint32 `cbor:"20,keyasint,omitempty"`
	Bytes  uint32 `cbor:"21,keyasint,omitempty"`
	// Target request of an interrupt.
	Interrupt uint64 `cbor:"22,keyasint,omitempty"`
}

// wireInfo is a vfs.FileInfo, its mode as Linux's st_mode.
type wireInfo struct {
	Name   string    `cbor:"1,keyasint,omitempty"`
	Size   int64     `cbor:"2,keyasint,omitempty"`
	Mode   uint32    `cbor:"3,keyasint,omitempty"`
	MTime  *wireTime `cbor:"4,keyasint,omitempty"`
	ATime  *wireTime `cbor:"5,keyasint,omitempty"`
	CTime  *wireTime `cbor:"6,keyasint,omitempty"`
	UID    uint32    `cbor:"7,keyasint,omitempty"`
	GID    uint32    `cbor:"8,keyasint,omitempty"`
	Nlink  uint32    `cbor:"9,keyasint,omitempty"`
	Ino    uint64    `cbor:"10,keyasint,omitempty"`
	Blocks int64     `cbor:"11,keyasint,omitempty"`
}

// wireStatFS is a vfs.StatFS.
type wireStatFS struct {
	_          struct{} `cbor:",toarray"`
	TotalBytes uint64
	FreeBytes  uint64
	TotalFiles uint64
	FreeFiles  uint64
	NameMax    uint32
	Reserved   uint64
}

// response is the header of a server frame.
type response struct {
	ID   uint64 `cbor:"1,keyasint,omitempty"`
	Kind uint8  `cbor:"2,keyasint,omitempty"`
	// Errno is the Linux errno of a failed request.
	Errno   uint32      `cbor:"3,keyasint,omitempty"`
	Info    *wireInfo   `cbor:"4,keyasint,omitempty"`
	Entries []wireInfo  `cbor:"5,keyasint,omitempty"`
	Handle  uint64      `cbor:"6,keyasint,omitempty"`
	N       int64       `cbor:"7,keyasint,omitempty"`
	EOF     bool        `cbor:"8,keyasint,omitempty"`
	Next    uint64      `cbor:"9,keyasint,omitempty"`
	Target  string      `cbor:"10,keyasint,omitempty"`
	StatFS  *wireStatFS `cbor:"11,keyasint,omitempty"`
	// Path is an invalidation's path.
	Path string `cbor:"12,keyasint,omitempty"`
	// Readonly and Version are the greeting's.
	Readonly bool   `cbor:"13,keyasint,omitempty"`
	Version  uint32 `cbor:"14,keyasint,omitempty"`
	// Reporting is the greeting's too: the roots of the provider's
	// providers whose every change the server reports in invalidations
	// (true) or not (false), at most MaxReporting of them.
	Reporting map[string]bool `cbor:"15,keyasint,omitempty"`
}

// MaxReporting bounds the roots of a greeting's Reporting; a provider
// with more announces none.
const MaxReporting = 32

// codec holds the CBOR modes of one end: the peer is untrusted, so
// decoding is bounded well inside a frame.
type codec struct {
	dec cbor.DecMode
	enc cbor.EncMode
}

func newCodec() codec {
	dec, err := cbor.DecOptions{
		MaxNestedLevels:  8,
		MaxArrayElements: MaxPageEntries,
		MaxMapPairs:      64,
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		IndefLength:      cbor.IndefLengthForbidden,
		TagsMd:           cbor.TagsForbidden,
		// Names are bytes on Linux, not UTF-8.
		UTF8: cbor.UTF8DecodeInvalid,
	}.DecMode()
	if err != nil {
		panic(fmt.Sprintf("vfsproto: decode options: %v", err))
	}
	enc, err := cbor.EncOptions{}.EncMode()
	if err != nil {
		panic(fmt.Sprintf("vfsproto: encode options: %v", err))
	}
	return codec{dec: dec, enc: enc}
}

// decodeRequest decodes a request frame's body into its header and its
// payload, which aliases body.
func (c codec) decodeRequest(body []byte) (request, []byte, error) {
	var req request
	rest, err := c.dec.UnmarshalFirst(body, &req)
	if err != nil {
		return request{}, nil, fmt.Errorf("decode request: %w", err)
	}
	return req, rest, nil
}

// decodeResponse decodes a server frame's body into its header and its
// payload, which aliases body.
func (c codec) decodeResponse(body []byte) (response, []byte, error) {
	var resp response
	rest, err := c.dec.UnmarshalFirst(body, &resp)
	if err != nil {
		return response{}, nil, fmt.Errorf("decode response: %w", err)
	}
	return resp, rest, nil
}

// readFrameLen reads a frame's length and checks it against MaxFrame. It
// returns io.EOF only at a frame boundary.
func readFrameLen(r *bufio.Reader) (int, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return 0, fmt.Errorf("read frame: %d bytes exceeds the %d byte limit", n, MaxFrame)
	}
	return int(n), nil
}

// readFull reads a frame's body.
func readFull(r io.Reader, b []byte) error {
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("read frame body: %w", err)
	}
	return nil
}
