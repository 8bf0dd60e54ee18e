// Command client is README.md's example of package client, as a program
// that runs: `airlock rpc` as a subprocess, a sandbox in it, commands,
// a file, events, and a second connection through the sandbox's control
// socket. Its test runs it and checks that README.md shows its code.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	c, err := client.Start(ctx, client.Options{}) // runs `airlock rpc` ($AIRLOCK_BIN, or on PATH)
	if err != nil {
		return err
	}
	defer c.Close() // tears its sandboxes down
	go func() {
		for ev := range c.Events() { // never blocks the client: a full buffer drops, counted by c.DroppedEvents()
			fmt.Fprintln(os.Stderr, "event:", ev.Type)
		}
	}()
	sb, err := c.Create(ctx, api.CreateParams{Resources: api.Resources{MemoryMB: 512}})
	if err != nil {
		return err
	}
	res, err := sb.Exec(ctx, "echo hello") // res.Stdout is []byte("hello\n")
	if err != nil {
		return err
	}
	fmt.Printf("%q\n", res.Stdout)
	p, err := sb.StartWith(ctx, api.ExecParams{Argv: []string{"sh", "-c", "echo streamed"}}, nil, os.Stdout, os.Stderr)
	if err != nil {
		return err
	}
	res, err = p.Wait()
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("the streamed command exited %d", res.ExitCode)
	}
	_, err = sb.ReadFile(ctx, "/workspace/missing")
	fmt.Println("missing:", errors.Is(err, fs.ErrNotExist))

	c2, err := client.DialSandbox(ctx, sb.ID(), client.Options{}) // a running sandbox's control socket
	if err != nil {
		return err
	}
	defer c2.Close()
	res, err = c2.Sandbox(sb.ID()).Exec(ctx, "echo through the socket")
	if err != nil {
		return err
	}
	fmt.Printf("%s", res.Stdout)
	return nil
}
