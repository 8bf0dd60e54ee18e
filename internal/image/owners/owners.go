// Package owners lets a caller without root keep the owners of an
// image's files. An image's layers give files to many ids (root, a
// service user, uid 1000...); only root may give files away, so an
// unprivileged caller's trees used to make every file its own, and a
// sandbox on such an image saw root own everything, its non-root users'
// homes included.
//
// A Mapped does the cache's work on trees (unpacking layers, linking,
// measuring, removing, packing as erofs) in a worker process that is
// root of a user namespace mapped exactly like that caller's sandboxes
// (subid.IDs.Maps: the caller's own ids are root, its subordinate ids
// are 1 and up). A file the image gives to id n then belongs on the
// host to the subordinate id that is n inside every sandbox of the
// caller: the tree, the overlay's lower layer of those sandboxes, shows
// each file with its image's owner. The worker is the agent binary
// (agentproto.ImageWorkerArg), started through its await-maps stage so
// that newuidmap and newgidmap write its maps before it runs.
package owners

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/image/untar"
)

// Worker operations, the first argument after agentproto.ImageWorkerArg.
const (
	opApply  = "apply"  // DIR OPTIONS-JSON; layers framed on stdin, a result per layer
	opLink   = "link"   // SRC DST
	opRemove = "remove" // DIR
	opUsage  = "usage"  // DIR
	opExec   = "exec"   // PROGRAM ARG...
)

// maxFrame bounds one frame of a layer's bytes on the worker's stdin: a
// 4-byte big-endian length, then that many bytes; a length of 0 ends
// the layer.
const maxFrame = 1 << 20

// maxResult bounds a result line on the worker's stdout.
const maxResult = 64 << 10

// result is what the worker answers: one JSON line per layer applied,
// or one for a link, remove or usage.
type result struct {
	Error string `json:"error,omitempty"`
	// LimitWhat and Limit carry an untar.LimitError.
	LimitWhat string       `json:"limit_what,omitempty"`
	Limit     int64        `json:"limit,omitempty"`
	Stats     *untar.Stats `json:"stats,omitempty"`
	Size      int64        `json:"size,omitempty"`
	Files     int64        `json:"files,omitempty"`
}

// err is the error the result carries, if any.
func (r result) err() error {
	switch {
	case r.LimitWhat != "":
		return &untar.LimitError{What: r.LimitWhat, Limit: r.Limit}
	case r.Error != "":
		return &workerError{msg: r.Error}
	}
	return nil
}

// workerError is an error the worker reported.
type workerError struct{ msg string }

func (e *workerError) Error() string { return e.msg }

// resultOf is the result that reports err.
func resultOf(err error) result {
	if err == nil {
		return result{}
	}
	if le, ok := errors.AsType[*untar.LimitError](err); ok {
		return result{LimitWhat: le.What, Limit: le.Limit, Error: le.Error()}
	}
	return result{Error: err.Error()}
}

func decodeResult(line []byte) (result, error) {
	var r result
	if err := json.Unmarshal(line, &r); err != nil {
		return result{}, fmt.Errorf("the image worker's answer %.100q: %w", line, err)
	}
	return r, nil
}
