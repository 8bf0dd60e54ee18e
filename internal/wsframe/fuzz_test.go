package wsframe

import (
	"bytes"
	"crypto/rand"
	"io"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// FuzzCopy feeds arbitrary bytes, as a client's frames or a server's,
// to two rewrites: the policy's, whose patterns (a random placeholder, a
// random value) never occur in the input, so that it changes nothing;
// and one that doubles every byte, so that the lengths change. The copy
// must not panic; every frame it writes must be within bounds, masked
// as its side wants, and in sequence; and the messages and control
// frames it writes must be the input's, rewritten, in order: all of them
// when the copy succeeds, the first ones when it fails.
func FuzzCopy(f *testing.F) {
	p, err := policy.New(policy.Config{
		AllowedHosts:   []string{scopedHost},
		Secrets:        map[string]policy.Secret{"API_KEY": {Value: "v-" + rand.Text(), Hosts: []string{scopedHost}}},
		ScrubResponses: true,
	}, policy.Options{})
	if err != nil {
		f.Fatal(err)
	}
	doubling := func(client bool) Rewriter {
		return Rewriter{
			Client: client,
			Bytes:  func(b []byte) ([]byte, error) { return double(b), nil },
			Stream: func(r io.Reader) io.Reader { return &doubler{r: r} },
		}
	}
	f.Fuzz(func(t *testing.T, in []byte, client bool) {
		policyRW := scrub(p, scopedHost)
		if client {
			policyRW = substitute(p, scopedHost)
		}
		inFrames, _, _ := decode(in, MaxPayload)
		inStream, _ := split(inFrames)
		for _, tc := range []struct {
			rw   Rewriter
			want func(msg) msg
		}{
			{policyRW, func(m msg) msg { return m }},
			{doubling(client), doubleMsg},
		} {
			out, err := copyFrames(tc.rw, in)
			frames, _, derr := decode(out, ChunkSize)
			if derr != nil {
				t.Fatalf("the output does not decode: %v", derr)
			}
			for i, f := range frames {
				if f.rsv != 0 || f.masked != client || f.op >= 8 && (!f.fin || len(f.payload) > 125) || f.op > 2 && f.op < 8 || f.op > 10 {
					t.Fatalf("frame %d out is not valid: fin %v rsv %d op %d masked %v, %d bytes", i, f.fin, f.rsv, f.op, f.masked, len(f.payload))
				}
			}
			got, serr := split(frames)
			if serr != nil {
				t.Fatalf("the output is out of sequence: %v", serr)
			}
			want := stream{messages: mapMsgs(inStream.messages, tc.want), controls: mapMsgs(inStream.controls, tc.want)}
			if err == nil && !equal(got, want) {
				t.Fatalf("the copy succeeded, but wrote\n%q\nfor\n%q", got, want)
			}
			if !isPrefix(got.messages, want.messages) || !isPrefix(got.controls, want.controls) {
				t.Fatalf("the copy (%v) wrote\n%q\nwhich does not begin\n%q", err, got, want)
			}
		}
	})
}

func mapMsgs(ms []msg, f func(msg) msg) []msg {
	out := make([]msg, len(ms))
	for i, m := range ms {
		out[i] = f(m)
	}
	return out
}

func isPrefix(a, b []msg) bool { return len(a) <= len(b) && slices.Equal(a, b[:len(a)]) }

func double(b []byte) []byte {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, c, c)
	}
	return out
}

// doubleMsg is what the doubling rewrite makes of a message or a
// control frame: a close frame keeps its status code.
func doubleMsg(m msg) msg {
	if m.op == 8 && len(m.payload) >= 2 {
		return msg{m.op, m.payload[:2] + string(double([]byte(m.payload[2:])))}
	}
	return msg{m.op, string(double([]byte(m.payload)))}
}

// doubler is the doubling rewrite of a stream.
type doubler struct {
	r   io.Reader
	out []byte
	err error
}

func (d *doubler) Read(p []byte) (int, error) {
	if len(d.out) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		var b [700]byte
		n, err := d.r.Read(b[:])
		d.out, d.err = double(b[:n]), err
		if len(d.out) == 0 {
			return 0, err
		}
	}
	n := copy(p, d.out)
	d.out = d.out[n:]
	return n, nil
}

// TestDoubling runs the doubling rewrite on a long message, which
// changes how it is framed.
func TestDoubling(t *testing.T) {
	long := bytes.Repeat([]byte("ab"), ChunkSize/2+100)
	in := encodeAll(frame{fin: true, op: 2, payload: long}, frame{fin: true, op: 1, payload: long[:ChunkSize]})
	out, err := copyFrames(Rewriter{Bytes: func(b []byte) ([]byte, error) { return double(b), nil }, Stream: func(r io.Reader) io.Reader { return &doubler{r: r} }}, in)
	if err != nil {
		t.Fatal(err)
	}
	frames, _, err := decode(out, ChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := split(frames)
	want := []msg{{2, string(double(long))}, {1, string(double(long[:ChunkSize]))}}
	if !slices.Equal(got.messages, want) {
		t.Errorf("messages of %d and %d bytes", len(got.messages[0].payload), len(got.messages[1].payload))
	}
}
