package wsframe

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/gobwas/ws"
)

const (
	scopedHost = "api.example.com"
	otherHost  = "other.example.org"
	value      = "s3cr3t-value"
)

// secrets is a real policy with one secret, scoped to scopedHost, and
// scrubbing on; ph is its placeholder.
func secrets(t testing.TB) (p *policy.Policy, ph string) {
	t.Helper()
	p, err := policy.New(policy.Config{
		AllowedHosts:   []string{scopedHost, otherHost},
		Secrets:        map[string]policy.Secret{"API_KEY": {Value: value, Hosts: []string{scopedHost}}},
		ScrubResponses: true,
	}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p, p.Env()["API_KEY"]
}

// substitute is the rewrite of the frames a client sends to host.
func substitute(p *policy.Policy, host string) Rewriter {
	sub := p.Substituter(host)
	return Rewriter{
		Client: true,
		Bytes:  sub.Bytes,
		Stream: func(r io.Reader) io.Reader { return sub.Reader(r, -1) },
	}
}

// scrub is the rewrite of the frames a server sends back.
func scrub(p *policy.Policy, host string) Rewriter {
	s := p.ResponseScrubber(p.Substituter(host))
	return Rewriter{
		Bytes:  func(b []byte) ([]byte, error) { return s.Bytes(b), nil },
		Stream: s.Reader,
	}
}

func text(fin bool, s string) frame { return frame{fin: fin, op: 1, payload: []byte(s)} }
func cont(fin bool, s string) frame { return frame{fin: fin, op: 0, payload: []byte(s)} }
func ctl(op byte, s string) frame   { return frame{fin: true, op: op, payload: []byte(s)} }

func masked(frames ...frame) []frame {
	out := slices.Clone(frames)
	for i := range out {
		out[i].masked = true
	}
	return out
}

// run copies frames through rw, the input given a few bytes at a time,
// and returns what came out, decoded and sorted.
func run(t *testing.T, rw Rewriter, frames []frame) (stream, []frame, error) {
	t.Helper()
	var out bytes.Buffer
	_, _, err := rw.Copy(&out, &chunkReader{b: encodeAll(frames...), n: 5})
	got, _, derr := decode(out.Bytes(), ChunkSize)
	if derr != nil {
		t.Fatalf("the output does not decode: %v", derr)
	}
	for i, f := range got {
		if f.masked != rw.Client || f.rsv != 0 {
			t.Errorf("frame %d out: masked %v, rsv %d", i, f.masked, f.rsv)
		}
	}
	s, serr := split(got)
	if serr != nil {
		t.Fatalf("the output is out of sequence: %v", serr)
	}
	return s, got, err
}

func TestSubstituteAcrossFragments(t *testing.T) {
	p, ph := secrets(t)
	half := len(ph) / 2
	in := masked(
		text(false, "key="+ph[:half]),
		ctl(0x9, "ping "+ph), // between two fragments
		cont(false, ph[half:]+";"),
		cont(true, " and "+ph),
		text(true, ph), // one short frame: through Bytes
		ctl(0x8, "\x03\xe8bye "+ph),
	)
	s, _, err := run(t, substitute(p, scopedHost), in)
	if err != nil {
		t.Fatal(err)
	}
	want := stream{
		messages: []msg{{1, "key=" + value + "; and " + value}, {1, value}},
		controls: []msg{{0x9, "ping " + value}, {0x8, "\x03\xe8bye " + value}},
	}
	if !equal(s, want) {
		t.Errorf("got %+v\nwant %+v", s, want)
	}
}

func TestScrubAcrossFragments(t *testing.T) {
	p, ph := secrets(t)
	in := []frame{
		{op: 2, payload: []byte("echo " + value[:4])},
		cont(false, value[4:]),
		cont(true, ""),
		ctl(0xA, value),
	}
	s, _, err := run(t, scrub(p, scopedHost), in)
	if err != nil {
		t.Fatal(err)
	}
	want := stream{messages: []msg{{2, "echo " + ph}}, controls: []msg{{0xA, ph}}}
	if !equal(s, want) {
		t.Errorf("got %+v\nwant %+v", s, want)
	}
}

// TestLeak: a placeholder of a secret not scoped to the host stops the
// copy; nothing of it, nor after it, is written.
func TestLeak(t *testing.T) {
	p, ph := secrets(t)
	long := strings.Repeat("x", 3*ChunkSize)
	for _, tc := range []struct {
		name  string
		in    []frame
		clean []msg // the messages that get through whole
	}{
		{"short", masked(text(true, "fine"), text(true, "key="+ph)), []msg{{1, "fine"}}},
		{"split", masked(text(true, "fine"), text(false, long+ph[:5]), cont(true, ph[5:]+"tail")), []msg{{1, "fine"}}},
		{"control", masked(text(true, "fine"), ctl(0x9, ph), text(true, "after")), []msg{{1, "fine"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, err := run(t, substitute(p, otherHost), tc.in)
			var be *policy.BlockError
			if !errors.As(err, &be) || be.Reason != policy.ReasonSecretLeak {
				t.Fatalf("error %v, want a secret_leak block", err)
			}
			if !slices.Equal(s.messages, tc.clean) {
				t.Errorf("messages %q, want %q", s.messages, tc.clean)
			}
			var out bytes.Buffer
			substitute(p, otherHost).Copy(&out, bytes.NewReader(encodeAll(tc.in...)))
			frames, _, _ := decode(out.Bytes(), ChunkSize)
			for _, f := range frames {
				if bytes.Contains(f.payload, []byte(ph[:5])) {
					t.Errorf("a frame out carries the placeholder's start: %q", f.payload)
				}
			}
		})
	}
}

// TestFraming: without a rewrite, a message keeps its payload and its
// type, long or fragmented; client frames leave masked with fresh keys,
// and short frames as they came.
func TestFraming(t *testing.T) {
	long := strings.Repeat("0123456789", 10000)
	in := masked(
		text(true, "short"),
		frame{fin: true, op: 2, payload: []byte(long)},
		text(false, "a"), cont(false, ""), ctl(0x9, ""), cont(true, "b"),
		text(true, ""),
		ctl(0x8, ""),
	)
	for _, rw := range []Rewriter{{Client: true}, {Client: true, Bytes: func(b []byte) ([]byte, error) { return b, nil }}} {
		s, out, err := run(t, rw, in)
		if err != nil {
			t.Fatal(err)
		}
		want := stream{
			messages: []msg{{1, "short"}, {2, long}, {1, "ab"}, {1, ""}},
			controls: []msg{{0x9, ""}, {0x8, ""}},
		}
		if !equal(s, want) {
			t.Errorf("got %+v\nwant %+v", s, want)
		}
		if !slices.EqualFunc(out[:1], in[:1], func(a, b frame) bool { return a.fin == b.fin && a.op == b.op && bytes.Equal(a.payload, b.payload) }) {
			t.Errorf("first frame %+v, want it as it came", out[0])
		}
		for _, f := range out {
			if len(f.payload) > ChunkSize {
				t.Errorf("a frame of %d bytes", len(f.payload))
			}
		}
	}
	// Fresh keys: not the ones the frames came with.
	b, err := copyFrames(Rewriter{Client: true}, encodeAll(in...))
	if err != nil {
		t.Fatal(err)
	}
	_, inKeys, _ := decode(encodeAll(in...), MaxPayload)
	_, outKeys, _ := decode(b, MaxPayload)
	if slices.Equal(inKeys[:1], outKeys[:1]) {
		t.Errorf("the first frame kept its masking key %v", inKeys[0])
	}
}

// TestRefused: frames that break the protocol or the bounds, or that
// are cut short, stop the copy before anything of them is written.
func TestRefused(t *testing.T) {
	long := strings.Repeat("x", ws.MaxControlFramePayloadSize)
	for _, tc := range []struct {
		name   string
		client bool
		in     []byte
		want   error
	}{
		{"compressed", true, encodeAll(frame{fin: true, rsv: 4, op: 1, masked: true, payload: []byte("x")}), ws.ErrProtocolNonZeroRsv},
		{"rsv3", false, encodeAll(frame{fin: true, rsv: 1, op: 2}), ws.ErrProtocolNonZeroRsv},
		{"unmasked client", true, encodeAll(text(true, "x")), ws.ErrProtocolMaskRequired},
		{"masked server", false, encodeAll(masked(text(true, "x"))...), ws.ErrProtocolMaskUnexpected},
		{"reserved opcode", false, encodeAll(frame{fin: true, op: 3}), ws.ErrProtocolOpCodeReserved},
		{"continuation first", false, encodeAll(cont(true, "x")), ws.ErrProtocolContinuationUnexpected},
		{"new message inside one", false, encodeAll(text(false, "x"), text(true, "y")), ws.ErrProtocolContinuationExpected},
		{"fragmented ping", false, encodeAll(frame{op: 9}), ws.ErrProtocolControlNotFinal},
		{"long ping", false, encodeAll(ctl(9, long+"x")), ws.ErrProtocolControlPayloadOverflow},
		{"one-byte close", false, encodeAll(ctl(8, "x")), ErrProtocol},
		{"too long", false, []byte{0x82, 127, 0, 0, 0, 0, 1, 0, 0, 1}, ErrTooLong},
		{"length MSB", false, []byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1}, ws.ErrHeaderLengthMSB},
		{"truncated header", false, []byte{0x82, 126, 1}, io.ErrUnexpectedEOF},
		{"truncated payload", false, []byte{0x82, 3, 'a'}, io.ErrUnexpectedEOF},
		{"truncated message", false, encodeAll(text(false, "a")), io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := copyFrames(Rewriter{Client: tc.client}, tc.in)
			if !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrTooLong) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("error %v is none of the package's", err)
			}
			// A message's first fragment may go before the next frame
			// is read.
			if !strings.Contains(tc.name, "message") && len(out) > 0 {
				t.Errorf("wrote %q", out)
			}
		})
	}
}

// TestControlTooLong: a rewrite that takes a control frame's payload
// past 125 bytes fails closed.
func TestControlTooLong(t *testing.T) {
	p, ph := secrets(t)
	in := ctl(0xA, strings.Repeat("v", 110)+value)
	_, err := copyFrames(scrub(p, scopedHost), encodeAll(in))
	if !errors.Is(err, ErrControlTooLong) || len(ph) < len(value)+5 {
		t.Errorf("error %v, want ErrControlTooLong", err)
	}
}

func TestWriteClose(t *testing.T) {
	for _, client := range []bool{false, true} {
		var b bytes.Buffer
		if err := (Rewriter{Client: client}).WriteClose(&b, ws.StatusPolicyViolation, "no"); err != nil {
			t.Fatal(err)
		}
		frames, _, err := decode(b.Bytes(), 125)
		if err != nil || len(frames) != 1 || frames[0].op != 8 || !frames[0].fin || frames[0].masked != client || string(frames[0].payload) != "\x03\xf0no" {
			t.Errorf("client %v: %+v, %v", client, frames, err)
		}
	}
}

func equal(a, b stream) bool {
	return slices.Equal(a.messages, b.messages) && slices.Equal(a.controls, b.controls)
}
