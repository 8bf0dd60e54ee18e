// Command airlock-pullbench measures how fast airlock pulls an image from
// a registry on this machine: a ~100 MB image into an empty cache, and a
// second image that shares all but one of its layers, next to
// `skopeo copy` of the same images in the same run. It starts Debian's
// docker-registry on a loopback port, pushes images it makes itself,
// prints a Markdown table and writes the numbers as JSON.
//
//	go run ./bench/cmd/airlock-pullbench [-mb 100] [-layers 5] [-rounds 3] [-json FILE]
//
// See bench/README.md.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/bench/internal/stats"
	"github.com/airlock-sandbox/airlock/internal/image/oci"
	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// row is one measured way of pulling, over the rounds.
type row struct {
	Name    string    `json:"name"`
	Bytes   int64     `json:"bytes"` // the image's compressed layers
	Seconds []float64 `json:"seconds"`
	MBps    float64   `json:"mb_per_s"` // Bytes / the median round, 10^6 B/s
	Note    string    `json:"note,omitempty"`
}

type report struct {
	Timestamp string `json:"timestamp"`
	Layers    int    `json:"layers"`
	ImageMB   int    `json:"image_mb"`
	Rounds    int    `json:"rounds"`
	Skopeo    string `json:"skopeo,omitempty"`
	Rows      []row  `json:"rows"`
	Errors    []string
}

func main() {
	var (
		mb       = flag.Int("mb", 100, "size of the image's layers in `MB` (incompressible)")
		nLayers  = flag.Int("layers", 5, "layers of the image")
		rounds   = flag.Int("rounds", 3, "rounds of each measurement")
		jsonPath = flag.String("json", filepath.Join("bench", "results", "pull.json"), "write the results as JSON to `FILE` (\"-\" for none)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, *mb, *nLayers, *rounds)
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-pullbench: %v\n", err)
		os.Exit(1)
	}
	printTable(os.Stdout, rep)
	if *jsonPath != "-" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		os.MkdirAll(filepath.Dir(*jsonPath), 0o755)
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "airlock-pullbench: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", *jsonPath)
	}
}

func logf(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }

func run(ctx context.Context, mb, nLayers, rounds int) (*report, error) {
	tmp, err := os.MkdirTemp("", "airlock-pullbench-")
	if err != nil {
		return nil, err
	}
	defer store.RemoveTree(tmp)
	host, stopReg, err := startRegistry(ctx, tmp)
	if err != nil {
		return nil, err
	}
	defer stopReg()

	logf("making and pushing the images (%d MB in %d layers)", mb, nLayers)
	per := int64(mb) * 1e6 / int64(nLayers)
	var layers []v1.Layer
	for i := range nLayers {
		l, err := randomLayer(fmt.Sprintf("layer-%d", i), per)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	extra, err := randomLayer("extra", per)
	if err != nil {
		return nil, err
	}
	// b shares every layer of a but the last, which is its own.
	a, err := push(host, "bench/a:1", layers...)
	if err != nil {
		return nil, err
	}
	b, err := push(host, "bench/b:1", append(slices.Clone(layers[:nLayers-1]), extra)...)
	if err != nil {
		return nil, err
	}
	size := func(img v1.Image) int64 {
		ls, _ := img.Layers()
		var n int64
		for _, l := range ls {
			s, _ := l.Size()
			n += s
		}
		return n
	}
	rep := &report{Timestamp: time.Now().UTC().Format(time.RFC3339), Layers: nLayers, ImageMB: mb, Rounds: rounds}
	refA, refB := host+"/bench/a:1", host+"/bench/b:1"

	cold := row{Name: "airlock image pull, empty cache", Bytes: size(a), Note: "download, verify and unpack"}
	coldDL := row{Name: "… of which until the last layer is downloaded", Bytes: size(a)}
	shared := row{Name: "airlock image pull, all but one layer cached", Bytes: size(b), Note: "MB/s of the whole image"}
	for r := range rounds {
		logf("round %d/%d: airlock", r+1, rounds)
		cache, err := store.Open(filepath.Join(tmp, fmt.Sprintf("cache-%d", r)))
		if err != nil {
			return nil, err
		}
		var mu sync.Mutex
		var lastDL time.Time
		start := time.Now()
		if _, err := oci.Pull(ctx, cache, refA, oci.Options{}, func(p store.Progress) {
			if p.Step == "download" && p.Total > 0 && p.Done == p.Total {
				mu.Lock()
				lastDL = time.Now()
				mu.Unlock()
			}
		}); err != nil {
			return nil, err
		}
		cold.Seconds = append(cold.Seconds, time.Since(start).Seconds())
		coldDL.Seconds = append(coldDL.Seconds, lastDL.Sub(start).Seconds())
		start = time.Now()
		if _, err := oci.Pull(ctx, cache, refB, oci.Options{}, nil); err != nil {
			return nil, err
		}
		shared.Seconds = append(shared.Seconds, time.Since(start).Seconds())
		store.RemoveTree(cache.Dir())
	}
	rep.Rows = append(rep.Rows, cold, coldDL, shared)

	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		rep.Errors = append(rep.Errors, "skopeo is not installed (apt-get install skopeo): no reference rows")
	} else {
		if out, err := exec.Command(skopeo, "--version").Output(); err == nil {
			rep.Skopeo = string(bytes.TrimSpace(out))
		}
		sk := row{Name: "skopeo copy docker://… dir:…", Bytes: size(a), Note: "download and verify, no unpack"}
		skShared := row{Name: "skopeo copy docker://… oci:… holding the other image", Bytes: size(b), Note: "reuses the blobs the layout holds"}
		for r := range rounds {
			logf("round %d/%d: skopeo", r+1, rounds)
			d, err := skopeoCopy(ctx, skopeo, refA, "dir:"+filepath.Join(tmp, fmt.Sprintf("dir-%d", r)))
			if err != nil {
				return nil, err
			}
			sk.Seconds = append(sk.Seconds, d.Seconds())
			lay := filepath.Join(tmp, fmt.Sprintf("oci-%d", r))
			if _, err := skopeoCopy(ctx, skopeo, refA, "oci:"+lay+":a"); err != nil {
				return nil, err
			}
			d, err = skopeoCopy(ctx, skopeo, refB, "oci:"+lay+":b")
			if err != nil {
				return nil, err
			}
			skShared.Seconds = append(skShared.Seconds, d.Seconds())
			store.RemoveTree(lay)
			store.RemoveTree(filepath.Join(tmp, fmt.Sprintf("dir-%d", r)))
		}
		rep.Rows = append(rep.Rows, sk, skShared)
	}
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if med := stats.Percentile(r.Seconds, 50); med > 0 {
			r.MBps = float64(r.Bytes) / 1e6 / med
		}
	}
	return rep, nil
}

func skopeoCopy(ctx context.Context, skopeo, ref, dest string) (time.Duration, error) {
	start := time.Now()
	cmd := exec.CommandContext(ctx, skopeo, "copy", "--quiet", "--src-tls-verify=false", "docker://"+ref, dest)
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("skopeo copy %s %s: %v: %s", ref, dest, err, out)
	}
	return time.Since(start), nil
}

// randomLayer is a gzip layer holding one file of n incompressible bytes.
func randomLayer(seed string, n int64) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "data/" + seed, Mode: 0o644, Size: n, Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	x := uint64(len(seed))*0x9e3779b97f4a7c15 + 1
	for _, c := range []byte(seed) {
		x = (x ^ uint64(c)) * 1099511628211
	}
	chunk := make([]byte, 1<<16)
	for left := n; left > 0; {
		for i := 0; i < len(chunk); i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			for j := 0; j < 8; j++ {
				chunk[i+j] = byte(x >> (8 * j))
			}
		}
		k := min(left, int64(len(chunk)))
		tw.Write(chunk[:k])
		left -= k
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

func push(host, repoTag string, layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	ref, err := name.ParseReference(host + "/" + repoTag)
	if err != nil {
		return nil, err
	}
	return img, remote.Write(ref, img)
}

// startRegistry runs docker-registry on a free loopback port, its
// storage under dir.
func startRegistry(ctx context.Context, dir string) (string, func(), error) {
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		return "", nil, fmt.Errorf("docker-registry is not installed (Debian: apt-get install docker-registry)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", filepath.Join(dir, "registry"), addr)
	cfgPath := filepath.Join(dir, "registry.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "serve", cfgPath)
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	for deadline := time.Now().Add(20 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("docker-registry did not answer on %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func printTable(w io.Writer, rep *report) {
	var load string
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = " · load " + string(bytes.Fields(b)[0])
	}
	fmt.Fprintf(w, "\n### Image pull from a local registry (%d MB in %d layers, %d rounds%s)\n\n", rep.ImageMB, rep.Layers, rep.Rounds, load)
	fmt.Fprintln(w, "| how | image MB | median s | min s | MB/s | note |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|")
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "| %s | %.1f | %.2f | %.2f | %.0f | %s |\n", r.Name, float64(r.Bytes)/1e6, stats.Percentile(r.Seconds, 50), slices.Min(r.Seconds), r.MBps, r.Note)
	}
	if rep.Skopeo != "" {
		fmt.Fprintf(w, "\nReference: %s.\n", rep.Skopeo)
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "\nnote: %s\n", e)
	}
}
