package client_test

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

func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Start(ctx, client.Options{Stderr: os.Stderr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // the server tears its sandboxes down

	sb, err := c.Create(ctx, api.CreateParams{Resources: api.Resources{MemoryMB: 512}})
	if err != nil {
		log.Fatal(err)
	}
	res, err := sb.Exec(ctx, "python3 -c 'print(6*7)'")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.ExitCode, string(res.Stdout), res.KilledBy)

	if err := sb.WriteFile(ctx, "/workspace/in.txt", []byte("data"), 0o644); err != nil {
		log.Fatal(err)
	}
	if _, err := sb.ReadFile(ctx, "/workspace/out.txt"); errors.Is(err, fs.ErrNotExist) {
		fmt.Println("no output yet")
	}
}

func ExampleSandbox_StartWith() {
	ctx := context.Background()
	c, err := client.Start(ctx, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sb, err := c.Create(ctx, api.CreateParams{})
	if err != nil {
		log.Fatal(err)
	}
	// Output goes to this process's stdout and stderr as it comes.
	p, err := sb.StartWith(ctx, api.ExecParams{Argv: []string{"sh", "-c", "for i in 1 2 3; do echo $i; sleep 1; done"}},
		nil, os.Stdout, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	res, err := p.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit", res.ExitCode)
}

func ExampleClient_Events() {
	ctx := context.Background()
	c, err := client.Start(ctx, client.Options{EventBuffer: 1024})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe(ctx, client.EventExec, client.EventFile); err != nil {
		log.Fatal(err)
	}
	go func() {
		for ev := range c.Events() { // closed when the client closes
			switch {
			case ev.Exec != nil:
				fmt.Println(ev.SandboxID, ev.Exec.Command, ev.Exec.ExitCode)
			case ev.File != nil:
				fmt.Println(ev.SandboxID, ev.File.Op, ev.File.Path)
			}
		}
	}()
	// ... use sandboxes; c.DroppedEvents() says how many events did not fit.
}

func ExampleDialSandbox() {
	ctx := context.Background()
	// A sandbox started with `airlock run --detach -- CMD`.
	c, err := client.DialSandbox(ctx, "sb-5f21a0bd831e", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // the sandbox keeps running
	res, err := c.Sandbox("").Exec(ctx, "uptime")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(res.Stdout))
}
