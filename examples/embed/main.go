// Command embed is README.md's example of the embed API, as a program
// that runs: a sandbox, a buffered and a streaming command, and every
// file operation. Its test runs it and checks that README.md shows its
// code.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	sb, err := airlock.Create(ctx, airlock.Config{
		Resources: airlock.Resources{CPUs: 1, MemoryMB: 512, TimeoutSeconds: 300},
		Env:       map[string]string{"MODE": "test"},
	})
	if err != nil {
		return err
	}
	defer sb.Close()

	res, err := sb.Exec(ctx, "python3 -c 'print(6*7)'") // buffered
	if err != nil {
		return err
	}
	fmt.Println(res.ExitCode, strings.TrimSpace(string(res.Stdout)), res.KilledBy)

	pr, pw := io.Pipe()
	p, err := sb.Start(ctx, airlock.Command{ // streaming
		Argv:   []string{"python3", "-u", "-c", "print(input(), flush=True); import time; time.sleep(60)"},
		Stdout: pw, Stderr: io.Discard, OpenStdin: true, Timeout: time.Minute,
	})
	if err != nil {
		return err
	}
	p.WriteStdin([]byte("go\n"))
	p.CloseStdin()
	line, _ := bufio.NewReader(pr).ReadString('\n') // as it comes
	fmt.Print(line)
	p.Signal(syscall.SIGINT) // or cancel ctx, or p.Kill()
	res, err = p.Wait()
	if err != nil {
		return err
	}
	fmt.Println("interrupted:", res.ExitCode != 0)

	data := []byte(`{"n": 6}`)
	sb.WriteFile(ctx, "/workspace/in.json", data, 0o644)
	sb.Exec(ctx, `python3 -c 'import json; n = json.load(open("/workspace/in.json"))["n"]; json.dump({"n": n * 7}, open("/workspace/out.json", "w"))'`)
	out, err := sb.ReadFile(ctx, "/workspace/out.json")
	fmt.Println(string(out), err)
	_, err = sb.ReadFile(ctx, "/workspace/missing.json")
	fmt.Println("missing:", errors.Is(err, fs.ErrNotExist))
	files, err := sb.ListFiles(ctx, "/workspace")
	if err != nil {
		return err
	}
	info, err := sb.Stat(ctx, "/workspace/out.json")
	fmt.Println(len(files), "files;", info.Name, info.Size, "bytes", err)

	sb.Mkdir(ctx, "/workspace/a/b", 0o755, true)
	sb.Remove(ctx, "/workspace/a", true)
	r := strings.NewReader(strings.Repeat("x", 1<<20))
	sb.WriteFileFrom(ctx, "/workspace/big", r, 0o644) // streamed, whatever the size
	var w strings.Builder
	off, length := int64(10), int64(5)
	info, n, err := sb.ReadFileAt(ctx, "/workspace/big", &w, off, length) // length 0: to the end, streamed into w
	fmt.Println(n, w.String(), info.Size, err)
	r = strings.NewReader("yy")
	n, err = sb.WriteFileAt(ctx, "/workspace/big", r, off, 0o644, false) // in place; true: cut where it ends
	fmt.Println(n, err)
	sb.Symlink(ctx, "../lib/libfoo.so.1", "/workspace/libfoo.so") // stored as given, never followed
	t := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	err = sb.SetAttr(ctx, "/workspace/big", airlock.FileAttr{SetMode: true, Mode: 0o600, ModTime: t})
	res, _ = sb.Exec(ctx, "stat -c '%a %Y' /workspace/big; readlink /workspace/libfoo.so; head -c 16 /workspace/big")
	fmt.Print(string(res.Stdout))
	return err
}
