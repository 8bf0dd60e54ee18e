package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jsonblob"
)

// jsonResult is the shape printed by --json. Stdout and Stderr are left
// empty here: writeResult writes the output into them as it goes.
type jsonResult struct {
	SandboxID       string   `json:"sandbox_id"`
	ExitCode        int      `json:"exit_code"`
	Stdout          string   `json:"stdout"`
	Stderr          string   `json:"stderr"`
	StdoutEncoding  string   `json:"stdout_encoding,omitempty"`
	StderrEncoding  string   `json:"stderr_encoding,omitempty"`
	StdoutTruncated bool     `json:"stdout_truncated"`
	StderrTruncated bool     `json:"stderr_truncated"`
	DurationMs      int64    `json:"duration_ms"`
	CPUTimeMs       int64    `json:"cpu_time_ms"`
	PeakMemoryBytes int64    `json:"peak_memory_bytes"`
	KilledBy        *string  `json:"killed_by"`
	Signal          *int     `json:"signal"`
	LimitsHit       []string `json:"limits_hit,omitempty"`
	Notes           []string `json:"notes,omitempty"`
	// Ports are the ports the sandbox published (-p).
	Ports []airlock.PublishedPort `json:"ports,omitempty"`
}

// encodingOf is how output goes into JSON: as text when it is UTF-8,
// otherwise base64.
func encodingOf(b []byte) string {
	if utf8.Valid(b) {
		return ""
	}
	return "base64"
}

// jsonOut is standard output for JSON: buffered, and with what a
// terminal would act on escaped (see termSafeJSON).
type jsonOut struct {
	buf  *bufio.Writer
	safe *termSafeJSON
}

func newJSONOut(w io.Writer) *jsonOut {
	buf := bufio.NewWriterSize(w, 64<<10)
	return &jsonOut{buf: buf, safe: &termSafeJSON{w: buf}}
}

func (o *jsonOut) Write(p []byte) (int, error) { return o.safe.Write(p) }

func (o *jsonOut) Flush() error {
	if err := o.safe.Flush(); err != nil {
		return err
	}
	return o.buf.Flush()
}

// marshalJSON is encoding/json's compact encoding of v, as writeJSON
// writes it: no HTML escaping, a final newline.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeJSON(v any) error {
	b, err := marshalJSON(v)
	if err != nil {
		return err
	}
	out := newJSONOut(os.Stdout)
	if _, err := out.Write(b); err != nil {
		return err
	}
	return out.Flush()
}

// writeResult prints r with stdout and stderr as its output. The output
// is encoded into the line a piece at a time, so printing it takes no
// memory beyond the output itself, whatever its size or encoding (text
// that is all control characters is six times larger as JSON).
func writeResult(w io.Writer, r jsonResult, stdout, stderr []byte) error {
	r.Stdout, r.Stderr = "", ""
	r.StdoutEncoding, r.StderrEncoding = encodingOf(stdout), encodingOf(stderr)
	b, err := marshalJSON(r)
	if err != nil {
		return err
	}
	atOut, err := jsonblob.Member(b, "stdout")
	if err != nil {
		return err
	}
	atErr, err := jsonblob.Member(b, "stderr")
	if err != nil {
		return err
	}
	if atErr < atOut {
		return errors.New("encode the result: stderr before stdout")
	}
	out := newJSONOut(w)
	for _, part := range []struct {
		json     []byte
		output   []byte
		encoding string
	}{
		{b[:atOut], stdout, r.StdoutEncoding},
		{b[atOut:atErr], stderr, r.StderrEncoding},
		{b[atErr:], nil, ""},
	} {
		if _, err := out.Write(part.json); err != nil {
			return err
		}
		if part.encoding == "base64" {
			err = jsonblob.WriteBase64(out, part.output)
		} else {
			err = jsonblob.WriteText(out, part.output, false)
		}
		if err != nil {
			return err
		}
	}
	return out.Flush()
}
