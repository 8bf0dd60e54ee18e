//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/bench/internal/httpclient"
	"github.com/airlock-sandbox/airlock/bench/internal/stats"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// egressCmd, as the first argument, makes the benchmark binary run the
// egress measurements (egressMain) instead of the benchmark: the egress
// section starts it so, and package testnet starts it again inside a
// network namespace of its own.
const egressCmd = "__egress"

const (
	// egressRounds is how many times each latency series alternates
	// between the direct client and the one in the sandbox.
	egressRounds = 4
	// egressBulkRounds is how many downloads of each kind, each way.
	egressBulkRounds = 3
	// egressKeepAliveWarmup are the untimed requests of each keep-alive
	// run, on the connection that is then timed.
	egressKeepAliveWarmup = 20
	// clientInSandbox is where the client binary goes in the sandbox.
	clientInSandbox = "/tmp/airlock-httpclient"
)

// egressParams is what the egress section asks of the process that
// measures, as JSON in its second argument.
type egressParams struct {
	Agent  string `json:"agent"`
	Client string `json:"client"`
	// Requests are the timed keep-alive requests of each protocol, each
	// way, over all rounds; Conns the timed new connections each way;
	// Names the names never seen before, each connected to once each
	// way; BulkBytes the size of each download. 0 leaves that part out.
	Requests  int   `json:"requests"`
	Conns     int   `json:"conns"`
	Names     int   `json:"names"`
	BulkBytes int64 `json:"bulk_bytes"`
	// CPUProfile is a directory for a CPU profile of the measuring
	// process during each run of the client in the sandbox.
	CPUProfile string        `json:"cpu_profile,omitempty"`
	Timeout    time.Duration `json:"timeout"`
}

// egressResult compares one HTTP client run directly with the same
// client run in a sandbox whose egress goes through airlock, against a
// local server.
type egressResult struct {
	// Skipped says why the section did not run, when it did not.
	Skipped string `json:"skipped,omitempty"`
	Rounds  int    `json:"rounds"`
	// Requests, Conns and Names are per way, over all rounds.
	Requests   int   `json:"keepalive_requests"`
	Warmup     int   `json:"keepalive_warmup"`
	Conns      int   `json:"new_connections"`
	Names      int   `json:"new_names"`
	BulkBytes  int64 `json:"bulk_bytes"`
	BulkRounds int   `json:"bulk_rounds"`
	// CreateMs is airlock.Create of the sandbox, network included.
	CreateMs float64  `json:"sandbox_create_ms"`
	Notes    []string `json:"notes,omitempty"`

	HTTPKeepAlive  *egressLatency `json:"http_keepalive,omitempty"`
	HTTPSKeepAlive *egressLatency `json:"https_keepalive,omitempty"`
	// NewConn is a request on a new TCP connection with a new TLS
	// handshake each time, to a name seen before; DNS, Connect and TLS
	// are its phases.
	NewConn        *egressLatency `json:"https_new_connection,omitempty"`
	NewConnDNS     *egressLatency `json:"https_new_connection_dns,omitempty"`
	NewConnConnect *egressLatency `json:"https_new_connection_tcp_connect,omitempty"`
	NewConnTLS     *egressLatency `json:"https_new_connection_tls_handshake,omitempty"`
	// NewName is the same for the first connection to a name never seen
	// before, with its phases.
	NewName        *egressLatency `json:"https_new_name,omitempty"`
	NewNameDNS     *egressLatency `json:"https_new_name_dns,omitempty"`
	NewNameConnect *egressLatency `json:"https_new_name_tcp_connect,omitempty"`
	NewNameTLS     *egressLatency `json:"https_new_name_tls_handshake,omitempty"`
	BulkHTTPS      *egressBulk    `json:"bulk_https,omitempty"`
	BulkHTTP       *egressBulk    `json:"bulk_http,omitempty"`
	// SlirpSkipped says why the downloads were not also measured
	// through slirp4netns.
	SlirpSkipped string       `json:"slirp4netns_skipped,omitempty"`
	Leaves       egressLeaves `json:"leaves"`
}

// egressSide is one way (direct or through airlock) of a latency series.
type egressSide struct {
	Latency stats.Summary `json:"latency_ms"`
	// RPS is requests per second over all rounds: requests / their
	// total time, for the keep-alive series.
	RPS float64 `json:"requests_per_s,omitempty"`
	// RoundP50 and RoundRPS are each round's own.
	RoundP50 []float64 `json:"round_p50_ms"`
	RoundRPS []float64 `json:"round_requests_per_s,omitempty"`
	samples  []float64
	reqs     int
	elapsed  float64
}

func (s *egressSide) add(lat []float64, reqs int, elapsedMs float64, rps bool) {
	s.samples = append(s.samples, lat...)
	s.RoundP50 = append(s.RoundP50, stats.Percentile(lat, 50))
	if rps && elapsedMs > 0 {
		s.reqs += reqs
		s.elapsed += elapsedMs
		s.RoundRPS = append(s.RoundRPS, float64(reqs)/(elapsedMs/1e3))
	}
}

func (s *egressSide) finish() {
	s.Latency = stats.Summarize(s.samples)
	if s.elapsed > 0 {
		s.RPS = float64(s.reqs) / (s.elapsed / 1e3)
	}
}

// egressLatency is a latency series, direct and through airlock.
type egressLatency struct {
	Direct  egressSide `json:"direct"`
	Airlock egressSide `json:"airlock"`
	// AddedP50 is Airlock's p50 minus Direct's; RoundAddedP50 the same
	// round by round, for the spread.
	AddedP50      float64   `json:"added_p50_ms"`
	RoundAddedP50 []float64 `json:"round_added_p50_ms"`
}

func (l *egressLatency) finish() {
	l.Direct.finish()
	l.Airlock.finish()
	l.AddedP50 = l.Airlock.Latency.P50 - l.Direct.Latency.P50
	l.RoundAddedP50 = nil
	for i := range min(len(l.Direct.RoundP50), len(l.Airlock.RoundP50)) {
		l.RoundAddedP50 = append(l.RoundAddedP50, l.Airlock.RoundP50[i]-l.Direct.RoundP50[i])
	}
}

// egressBulk is one download timed several times each way.
type egressBulk struct {
	Direct  throughput `json:"direct"`
	Airlock throughput `json:"airlock"`
	// Ratio is Airlock.MBps / Direct.MBps, in percent; RoundRatio the
	// same round by round.
	Ratio      float64   `json:"ratio_percent"`
	RoundRatio []float64 `json:"round_ratio_percent"`
	// Slirp is the same download through slirp4netns, a user-mode
	// network that forwards without inspecting, for comparison;
	// SlirpRatio is its MBps / Direct.MBps, in percent.
	Slirp      *throughput `json:"slirp4netns,omitempty"`
	SlirpRatio float64     `json:"slirp4netns_ratio_percent,omitempty"`
}

// egressLeaves is what the interception CA minted while the client ran
// in the sandbox.
type egressLeaves struct {
	// MintsBefore and MintsAfter are the sandbox CA's Minted() before the
	// first request and after the last; MintsMeasured is false when the
	// CA could not be reached.
	MintsBefore   uint64 `json:"mints_before"`
	MintsAfter    uint64 `json:"mints_after"`
	MintsMeasured bool   `json:"mints_measured"`
	// Names is how many distinct names the client in the sandbox
	// resolved and connected to with TLS, and TLSConnections how many
	// TLS connections it made to them.
	Names          int `json:"distinct_names"`
	TLSConnections int `json:"tls_connections"`
	// LeavesSeen is how many distinct leaf certificates the client got
	// over all those connections: one per name when every leaf was
	// minted once.
	LeavesSeen int `json:"distinct_leaves_seen"`
}

// Mints is how many leaves the CA minted during the measurements.
func (l egressLeaves) Mints() uint64 { return l.MintsAfter - l.MintsBefore }

// measureEgress runs the egress section: this binary again, under
// egressCmd, which package testnet moves into a network namespace with
// the local servers, and whose JSON result it reads.
func measureEgress(ctx context.Context, p egressParams, logf func(string, ...any)) (*egressResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	arg, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, egressCmd, string(arg))
	cmd.Stdout = &out
	cmd.Stderr = &prefixWriter{logf: logf}
	// The measuring process, and with it the sandbox, ends with this
	// one, however this one ends. Pdeathsig belongs to the thread that
	// starts the child: keep this goroutine on it until the child is
	// gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("the egress measurements: %w", err)
	}
	var r egressResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("the egress measurements' result: %w (%q)", err, out.String())
	}
	return &r, nil
}

// prefixWriter passes the measuring process's lines to logf.
type prefixWriter struct {
	logf func(string, ...any)
	buf  []byte
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		w.logf("  egress: %s", w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// egressMain is the process that measures, started by measureEgress with
// the parameters in os.Args[2]. testnet.MainFunc runs it once more in a
// network namespace of its own, where it serves the local World, and
// runs the measurements there; the result goes to stdout as JSON.
func egressMain() int {
	if len(os.Args) != 3 {
		fmt.Fprintf(os.Stderr, "usage: %s %s PARAMS-JSON\n", os.Args[0], egressCmd)
		return 2
	}
	var p egressParams
	if err := json.Unmarshal([]byte(os.Args[2]), &p); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", egressCmd, err)
		return 2
	}
	return testnet.MainFunc(func() int {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if p.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, p.Timeout)
			defer cancel()
		}
		r, err := runEgress(ctx, p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	})
}

// runEgress serves the World, creates the sandbox and runs the client
// both ways, alternating.
func runEgress(ctx context.Context, p egressParams) (*egressResult, error) {
	r := &egressResult{
		Rounds: egressRounds, Warmup: egressKeepAliveWarmup, BulkRounds: egressBulkRounds,
		BulkBytes: p.BulkBytes,
	}
	perRound := func(n int) int {
		if n <= 0 {
			return 0
		}
		return max(1, (n+egressRounds-1)/egressRounds)
	}
	reqs, conns, names := perRound(p.Requests), perRound(p.Conns), perRound(p.Names)
	r.Requests, r.Conns, r.Names = reqs*egressRounds, conns*egressRounds, names*egressRounds
	if !testnet.Available() {
		// What Serve says is why.
		_, _, err := testnet.Serve(os.TempDir())
		r.Skipped = fmt.Sprintf("no network namespace with the local servers: %v", err)
		return r, nil
	}

	dir, err := os.MkdirTemp("", "airlock-bench-egress-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	w, stopWorld, err := testnet.Serve(dir)
	if err != nil {
		return nil, err
	}
	defer stopWorld()
	// Names never seen before: subdomains of api.example.com, which its
	// certificate covers, so that the direct client trusts them too.
	newNames := make([][]string, egressRounds)
	for i := range newNames {
		for j := 0; j < names; j++ {
			name := fmt.Sprintf("new-%d-%d.%s", i, j, testnet.API)
			w.DNS.Set(name, netip.MustParseAddr(testnet.APIAddr))
			newNames[i] = append(newNames[i], name)
		}
	}

	clientBin, err := os.ReadFile(p.Client)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	sb, err := airlock.Create(ctx, airlock.Config{
		AgentPath: p.Agent,
		Network: &policy.Config{
			AllowedHosts: []string{testnet.API, "*." + testnet.API},
			DNSServers:   []string{w.DNSAddr},
			ExtraRootCAs: []string{w.CAFile},
		},
	})
	if errors.Is(err, airlock.ErrUnavailable) {
		r.Skipped = err.Error()
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("create the sandbox: %w", err)
	}
	defer sb.Close()
	r.CreateMs = ms(time.Since(t0))
	r.Notes = sb.Notes()
	if err := sb.WriteFile(ctx, clientInSandbox, clientBin, 0o755); err != nil {
		return nil, fmt.Errorf("copy the client into the sandbox: %w", err)
	}
	if st, err := sb.NetworkStats(); err == nil {
		r.Leaves.MintsBefore, r.Leaves.MintsMeasured = st.LeavesMinted, true
	}

	m := &egressRunner{p: p, sb: sb, caFile: w.CAFile, leaves: map[string]map[string]bool{}}
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	api := func(port int, path string) string { return w.URL(testnet.API, port, path) }

	// One untimed run each way first: page cache, the sandbox's first
	// command, the client's first connection.
	warm := httpclient.Options{Mode: httpclient.KeepAlive, URLs: []string{api(443, "/")}, Count: 1, Warmup: 1}
	if _, _, err := m.pair(ctx, 0, "warm-up", "warmup", warm); err != nil {
		return nil, err
	}

	latency := func(what, slug string, o httpclient.Options, rps bool, opts func(round int, o *httpclient.Options)) (*egressLatency, *[3]egressLatency, error) {
		l := &egressLatency{}
		var phases [3]egressLatency
		for round := 0; round < egressRounds; round++ {
			o := o
			if opts != nil {
				opts(round, &o)
			}
			d, a, err := m.pair(ctx, round, what, slug, o)
			if err != nil {
				return nil, nil, err
			}
			l.Direct.add(d.LatencyMs, len(d.LatencyMs), d.ElapsedMs, rps)
			l.Airlock.add(a.LatencyMs, len(a.LatencyMs), a.ElapsedMs, rps)
			for i, f := range []func(*httpclient.Result) []float64{
				func(x *httpclient.Result) []float64 { return x.DNSMs },
				func(x *httpclient.Result) []float64 { return x.ConnectMs },
				func(x *httpclient.Result) []float64 { return x.TLSMs },
			} {
				phases[i].Direct.add(f(d), 0, 0, false)
				phases[i].Airlock.add(f(a), 0, 0, false)
			}
		}
		l.finish()
		for i := range phases {
			phases[i].finish()
		}
		return l, &phases, nil
	}

	if reqs > 0 {
		logf("keep-alive: %d warm-up + %d requests per run, HTTP and HTTPS, %d rounds each way", egressKeepAliveWarmup, reqs, egressRounds)
		for _, k := range []struct {
			port int
			dst  **egressLatency
		}{{80, &r.HTTPKeepAlive}, {443, &r.HTTPSKeepAlive}} {
			o := httpclient.Options{Mode: httpclient.KeepAlive, URLs: []string{api(k.port, "/")}, Count: reqs, Warmup: egressKeepAliveWarmup}
			if *k.dst, _, err = latency(fmt.Sprintf("keep-alive :%d", k.port), fmt.Sprintf("keepalive-%d", k.port), o, true, nil); err != nil {
				return nil, err
			}
		}
	}
	if conns > 0 {
		logf("new connections: 1 warm-up + %d HTTPS connections per run, %d rounds each way", conns, egressRounds)
		o := httpclient.Options{Mode: httpclient.NewConn, URLs: []string{api(443, "/")}, Count: conns, Warmup: 1}
		var phases *[3]egressLatency
		if r.NewConn, phases, err = latency("new connections", "newconn", o, false, nil); err != nil {
			return nil, err
		}
		r.NewConnDNS, r.NewConnConnect, r.NewConnTLS = &phases[0], &phases[1], &phases[2]
	}
	if names > 0 {
		logf("new names: 1 warm-up connection, then one HTTPS connection to each of %d names never seen before per run, %d rounds each way", names, egressRounds)
		o := httpclient.Options{Mode: httpclient.NewConn, WarmupURL: api(443, "/"), Count: 1, Warmup: 1}
		var phases *[3]egressLatency
		if r.NewName, phases, err = latency("new names", "newname", o, false, func(round int, o *httpclient.Options) {
			for _, n := range newNames[round] {
				o.URLs = append(o.URLs, w.URL(n, 443, "/"))
			}
		}); err != nil {
			return nil, err
		}
		r.NewNameDNS, r.NewNameConnect, r.NewNameTLS = &phases[0], &phases[1], &phases[2]
	}
	if p.BulkBytes > 0 {
		slirp, why := slirpPath()
		r.SlirpSkipped = why
		also := ""
		if slirp != "" {
			also = ", and through slirp4netns"
		}
		logf("bulk: %d MiB downloads, HTTPS and HTTP, %d each way%s", p.BulkBytes/mib, egressBulkRounds, also)
		type series struct {
			d, a, s []time.Duration
			ratios  []float64
		}
		var https, http series
		path := fmt.Sprintf("/bytes?n=%d", p.BulkBytes)
		for round := 0; round < egressBulkRounds; round++ {
			for _, k := range []struct {
				port int
				s    *series
			}{{443, &https}, {80, &http}} {
				what := fmt.Sprintf("bulk :%d", k.port)
				o := httpclient.Options{Mode: httpclient.Bulk, URLs: []string{api(k.port, path)}, WarmupURL: api(k.port, "/"), Count: 1, Warmup: 1}
				// slirp4netns runs before the pair in even rounds and
				// after it in odd ones, as the pair alternates.
				var sl *httpclient.Result
				runSlirp := func() error {
					if slirp == "" {
						return nil
					}
					var err error
					if sl, err = m.slirp(ctx, slirp, o); err != nil {
						return fmt.Errorf("%s, round %d: %w", what, round+1, err)
					}
					return nil
				}
				if round%2 == 0 {
					if err := runSlirp(); err != nil {
						return nil, err
					}
				}
				d, a, err := m.pair(ctx, round, what, fmt.Sprintf("bulk-%d", k.port), o)
				if err != nil {
					return nil, err
				}
				if round%2 == 1 {
					if err := runSlirp(); err != nil {
						return nil, err
					}
				}
				for _, x := range []*httpclient.Result{d, a, sl} {
					if x != nil && x.Bytes != p.BulkBytes {
						return nil, fmt.Errorf("%s: got %d bytes of %d", what, x.Bytes, p.BulkBytes)
					}
				}
				k.s.d, k.s.a = append(k.s.d, msDuration(d.ElapsedMs)), append(k.s.a, msDuration(a.ElapsedMs))
				k.s.ratios = append(k.s.ratios, 100*d.ElapsedMs/a.ElapsedMs)
				if sl != nil {
					k.s.s = append(k.s.s, msDuration(sl.ElapsedMs))
				}
			}
		}
		bulk := func(x series) *egressBulk {
			b := &egressBulk{Direct: newThroughput(p.BulkBytes, x.d), Airlock: newThroughput(p.BulkBytes, x.a), RoundRatio: x.ratios}
			if b.Direct.MBps > 0 {
				b.Ratio = 100 * b.Airlock.MBps / b.Direct.MBps
			}
			if len(x.s) > 0 {
				t := newThroughput(p.BulkBytes, x.s)
				b.Slirp = &t
				if b.Direct.MBps > 0 {
					b.SlirpRatio = 100 * t.MBps / b.Direct.MBps
				}
			}
			return b
		}
		r.BulkHTTPS, r.BulkHTTP = bulk(https), bulk(http)
	}

	if st, err := sb.NetworkStats(); err == nil && r.Leaves.MintsMeasured {
		r.Leaves.MintsAfter = st.LeavesMinted
	}
	r.Leaves.Names = len(m.leaves)
	r.Leaves.TLSConnections = m.handshakes
	for _, fps := range m.leaves {
		r.Leaves.LeavesSeen += len(fps)
	}
	return r, nil
}

// egressRunner runs the client both ways.
type egressRunner struct {
	p      egressParams
	sb     *airlock.Sandbox
	caFile string
	// leaves are, per name, the leaf certificates the client in the
	// sandbox got; handshakes its TLS handshakes.
	leaves     map[string]map[string]bool
	handshakes int
	profiles   int
}

// pair runs the client directly and in the sandbox, direct first in even
// rounds and last in odd ones, so that a drift of the machine falls on
// both alike. what names the measurement in errors, slug in the names of
// the profiles.
func (m *egressRunner) pair(ctx context.Context, round int, what, slug string, o httpclient.Options) (direct, sandboxed *httpclient.Result, err error) {
	if round%2 == 0 {
		if direct, err = m.direct(ctx, o); err == nil {
			sandboxed, err = m.sandboxed(ctx, slug, o)
		}
	} else {
		if sandboxed, err = m.sandboxed(ctx, slug, o); err == nil {
			direct, err = m.direct(ctx, o)
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s, round %d: %w", what, round+1, err)
	}
	return direct, sandboxed, nil
}

// direct runs the client in this namespace, asking the World's DNS
// server and trusting the World's CA: the path without airlock.
func (m *egressRunner) direct(ctx context.Context, o httpclient.Options) (*httpclient.Result, error) {
	o.DNS = testnet.DNSAddr
	cmd := exec.CommandContext(ctx, m.p.Client, o.Args()...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SSL_CERT_FILE=" + m.caFile}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("direct client: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return decodeClient("direct client", stdout.Bytes())
}

// sandboxed runs the client in the sandbox, with the sandbox's name
// server and trust store (SSL_CERT_FILE, which airlock sets): the path
// through airlock.
func (m *egressRunner) sandboxed(ctx context.Context, slug string, o httpclient.Options) (*httpclient.Result, error) {
	if m.p.CPUProfile != "" {
		m.profiles++
		f, err := os.Create(filepath.Join(m.p.CPUProfile, fmt.Sprintf("egress-%02d-%s.pprof", m.profiles, slug)))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := m.sb.Run(ctx, airlock.Command{Argv: append([]string{clientInSandbox}, o.Args()...)})
	if err != nil {
		return nil, fmt.Errorf("client in the sandbox: %w", err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("client in the sandbox: exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	x, err := decodeClient("client in the sandbox", res.Stdout)
	if err != nil {
		return nil, err
	}
	m.handshakes += x.Handshakes
	for name, fps := range x.Leaves {
		if m.leaves[name] == nil {
			m.leaves[name] = map[string]bool{}
		}
		for _, fp := range fps {
			m.leaves[name][fp] = true
		}
	}
	return x, nil
}

func decodeClient(what string, out []byte) (*httpclient.Result, error) {
	var x httpclient.Result
	if err := json.Unmarshal(out, &x); err != nil {
		return nil, fmt.Errorf("%s: %w (%q)", what, err, out)
	}
	return &x, nil
}

func msDuration(v float64) time.Duration {
	return time.Duration(math.Round(v * float64(time.Millisecond)))
}
