//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// workArg starts the program as the worker that runs inside a sandbox.
const workArg = "__work"

// workResult is what one run of the worker measured in one directory.
type workResult struct {
	// Sequential: bytes written (then fsync and close) and read back.
	WriteS float64 `json:"write_s,omitempty"`
	ReadS  float64 `json:"read_s,omitempty"`
	Bytes  int64   `json:"bytes,omitempty"`
	// Random 4 KiB reads: one at a time, and Threads at once.
	RandReads    int       `json:"rand_reads,omitempty"`
	RandS        float64   `json:"rand_s,omitempty"`
	RandParReads int       `json:"rand_par_reads,omitempty"`
	RandParS     float64   `json:"rand_par_s,omitempty"`
	Threads      int       `json:"threads,omitempty"`
	MetaFiles    int       `json:"meta_files,omitempty"`
	MetaS        float64   `json:"meta_s,omitempty"`
	MetaCreateS  float64   `json:"meta_create_s,omitempty"`
	MetaStatS    float64   `json:"meta_stat_s,omitempty"`
	MetaUnlinkS  float64   `json:"meta_unlink_s,omitempty"`
	GitStatusS   []float64 `json:"git_status_s,omitempty"`
	GitSetupS    float64   `json:"git_setup_s,omitempty"`
	GitFiles     int       `json:"git_files,omitempty"`
	FSType       string    `json:"fs_type,omitempty"`
	Dev          string    `json:"dev,omitempty"` // major:minor
	MountOptions string    `json:"mount_options,omitempty"`
	SuperOptions string    `json:"super_options,omitempty"`
	ReadAheadKB  string    `json:"read_ahead_kb,omitempty"`
	FuseMaxPages string    `json:"fuse_max_pages_limit,omitempty"`
}

// work is the worker's main: it measures the workloads named by -ops
// in -dir and prints one JSON workResult.
func work(args []string) {
	fl := flag.NewFlagSet(workArg, flag.ExitOnError)
	var (
		dir      = fl.String("dir", "", "directory to work in")
		ops      = fl.String("ops", "seq,rand,meta,git", "workloads: info, seq, rand, meta, git, gitsetup")
		size     = fl.Int64("size", 1<<30, "bytes of the sequential file")
		bs       = fl.Int("bs", 1<<20, "bytes per sequential read and write call")
		reads    = fl.Int("reads", 20000, "random 4 KiB reads, one at a time")
		parReads = fl.Int("par-reads", 40000, "random 4 KiB reads, -threads at once")
		threads  = fl.Int("threads", 8, "readers at once for the parallel random reads")
		files    = fl.Int("files", 10000, "files created, stated and unlinked")
		gitFiles = fl.Int("git-files", 5000, "files of the git tree")
		gitRuns  = fl.Int("git-runs", 3, "timed runs of git status (after one untimed)")
		seed     = fl.Uint64("seed", 1, "seed of the random offsets")
	)
	fl.Parse(args)
	r := &workResult{}
	die := func(err error) {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		die(err)
	}
	for _, op := range strings.Split(*ops, ",") {
		var err error
		switch op {
		case "info":
			err = r.info(*dir)
		case "seq":
			err = r.seq(*dir, *size, *bs)
		case "rand":
			err = r.random(*dir, *size, *reads, *parReads, *threads, *seed)
		case "meta":
			err = r.meta(*dir, *files)
		case "gitsetup":
			err = r.gitSetup(*dir, *gitFiles)
		case "git":
			err = r.gitStatus(*dir, *gitRuns)
		case "rm":
			err = os.Remove(filepath.Join(*dir, "seq"))
		default:
			err = fmt.Errorf("unknown workload %q", op)
		}
		if err != nil {
			die(fmt.Errorf("%s in %s: %w", op, *dir, err))
		}
	}
	json.NewEncoder(os.Stdout).Encode(r)
}

// seq writes size bytes to dir/seq in bs pieces, fsyncs and closes it
// (all timed), drops its cached pages where the file system lets it,
// and reads it back through a new descriptor.
func (r *workResult) seq(dir string, size int64, bs int) error {
	buf := make([]byte, bs)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i+8 <= len(buf); i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			buf[i+k] = byte(v >> (8 * k))
		}
	}
	name := filepath.Join(dir, "seq")
	start := time.Now()
	f, err := os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for done := int64(0); done < size; {
		n := min(int64(bs), size-done)
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
		done += n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	r.WriteS = time.Since(start).Seconds()
	r.Bytes = size
	if err := dropCache(name); err != nil {
		return err
	}
	start = time.Now()
	f, err = os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	var got int64
	for {
		n, err := f.Read(buf)
		got += int64(n)
		if err != nil || n == 0 {
			break
		}
	}
	r.ReadS = time.Since(start).Seconds()
	if got != size {
		return fmt.Errorf("read %d bytes back of %d", got, size)
	}
	return nil
}

// dropCache asks the kernel to forget the clean cached pages of name (a
// FUSE mount does; a tmpfs holds its files only there and keeps them).
func dropCache(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// random reads 4 KiB at random 4 KiB-aligned offsets of dir/seq: reads
// of them one after the other, then parReads spread over threads
// readers at once, each through a new descriptor with read-ahead off.
func (r *workResult) random(dir string, size int64, reads, parReads, threads int, seed uint64) error {
	name := filepath.Join(dir, "seq")
	if err := dropCache(name); err != nil {
		return err
	}
	pages := size / 4096
	run := func(n int, s uint64) error {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM); err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
		buf := make([]byte, 4096)
		for range n {
			if _, err := f.ReadAt(buf, rng.Int64N(pages)*4096); err != nil {
				return err
			}
		}
		return nil
	}
	if reads > 0 {
		start := time.Now()
		if err := run(reads, seed); err != nil {
			return err
		}
		r.RandS, r.RandReads = time.Since(start).Seconds(), reads
	}
	if parReads > 0 && threads > 0 {
		if err := dropCache(name); err != nil {
			return err
		}
		per := parReads / threads
		errs := make(chan error, threads)
		var wg sync.WaitGroup
		start := time.Now()
		for t := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- run(per, seed*1000+uint64(t)+1)
			}()
		}
		wg.Wait()
		r.RandParS, r.RandParReads, r.Threads = time.Since(start).Seconds(), per*threads, threads
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// meta creates n empty files in a new directory, stats each, then
// unlinks each: files per second is n over the three phases' time.
func (r *workResult) meta(dir string, n int) error {
	d, err := os.MkdirTemp(dir, "meta-")
	if err != nil {
		return err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = filepath.Join(d, fmt.Sprintf("f%05d", i))
	}
	start := time.Now()
	for _, p := range names {
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		unix.Close(fd)
	}
	t1 := time.Now()
	var st unix.Stat_t
	for _, p := range names {
		if err := unix.Stat(p, &st); err != nil {
			return err
		}
	}
	t2 := time.Now()
	for _, p := range names {
		if err := unix.Unlink(p); err != nil {
			return err
		}
	}
	t3 := time.Now()
	r.MetaFiles = n
	r.MetaCreateS, r.MetaStatS, r.MetaUnlinkS = t1.Sub(start).Seconds(), t2.Sub(t1).Seconds(), t3.Sub(t2).Seconds()
	r.MetaS = t3.Sub(start).Seconds()
	return os.Remove(d)
}

// git runs git in dir with no configuration of the user's or system's.
func git(dir string, args ...string) error {
	cmd := exec.Command("git", append([]string{"-c", "safe.directory=*", "-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// gitSetup writes a tree of n small files in 100 files a directory
// into dir/git, and commits it in a new repository.
func (r *workResult) gitSetup(dir string, n int) error {
	start := time.Now()
	root := filepath.Join(dir, "git")
	for i := range n {
		sub := filepath.Join(root, fmt.Sprintf("pkg%03d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return err
			}
		}
		body := strings.Repeat(fmt.Sprintf("line %d of file %d\n", i%37, i), 1+i%50)
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("file%04d.go", i)), []byte(body), 0o644); err != nil {
			return err
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "tree"}} {
		if err := git(root, args...); err != nil {
			return err
		}
	}
	r.GitSetupS, r.GitFiles = time.Since(start).Seconds(), n
	return nil
}

// gitStatus times `git status` in dir/git: one untimed run, then runs
// timed ones.
func (r *workResult) gitStatus(dir string, runs int) error {
	root := filepath.Join(dir, "git")
	for i := -1; i < runs; i++ {
		start := time.Now()
		if err := git(root, "status", "--porcelain"); err != nil {
			return err
		}
		if i >= 0 {
			r.GitStatusS = append(r.GitStatusS, time.Since(start).Seconds())
		}
	}
	return nil
}

// info describes the file system dir is on: its type, device, mount
// and superblock options (from /proc/self/mountinfo), and for a FUSE
// mount its read-ahead.
func (r *workResult) info(dir string) error {
	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err != nil {
		return err
	}
	switch sf.Type {
	case unix.TMPFS_MAGIC:
		r.FSType = "tmpfs"
	case unix.FUSE_SUPER_MAGIC:
		r.FSType = "fuse"
	case unix.EXT4_SUPER_MAGIC:
		r.FSType = "ext4"
	default:
		r.FSType = fmt.Sprintf("0x%x", sf.Type)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	r.Dev = fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	// The mount whose device is dir's and whose mount point is the
	// longest prefix of dir.
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	best := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 6 || len(fields) < sep+4 || fields[2] != r.Dev {
			continue
		}
		mp := fields[4]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best = mp
			r.MountOptions = fields[5]
			r.SuperOptions = fields[sep+3]
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%s/read_ahead_kb", r.Dev)); err == nil {
		r.ReadAheadKB = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/sys/fs/fuse/max_pages_limit"); err == nil {
		r.FuseMaxPages = strings.TrimSpace(string(b))
	}
	return nil
}
