// Package client drives airlock sandboxes from Go over airlock's JSON-RPC
// protocol (package api): by running `airlock rpc` as a subprocess
// (Start), through a detached sandbox's control socket (Dial), or over any
// transport (NewClient).
//
//	c, err := client.Start(ctx, client.Options{})
//	if err != nil {
//		return err
//	}
//	defer c.Close() // the server tears its sandboxes down
//
//	sb, err := c.Create(ctx, api.CreateParams{Resources: api.Resources{MemoryMB: 512}})
//	if err != nil {
//		return err
//	}
//	res, err := sb.Exec(ctx, "echo hello")
//	if err != nil {
//		return err
//	}
//	fmt.Print(string(res.Stdout)) // hello
//
//	if _, err := sb.ReadFile(ctx, "/workspace/missing"); errors.Is(err, fs.ErrNotExist) {
//		// ...
//	}
//
//	p, err := sb.StartWith(ctx, api.ExecParams{Argv: []string{"make"}}, nil, os.Stdout, os.Stderr)
//	if err != nil {
//		return err
//	}
//	res, err = p.Wait()
//
// A sandbox gets a network from CreateParams.Network, the JSON of a
// policy.Config (absent: no network at all). Commands see each secret as
// a placeholder (Sandbox.Env), and the allowed hosts change while it runs:
//
//	sb, err := c.Create(ctx, api.CreateParams{Network: json.RawMessage(`{
//		"allowed_hosts": ["api.example.com"],
//		"secrets": {"API_KEY": {"value": "...", "hosts": ["api.example.com"]}}}`)})
//	err = sb.AllowHost(ctx, "*.github.com")
//	allowed, denied, err := sb.Hosts(ctx)
//
// Network events (EventNetwork) report each HTTP request, DNS question
// and connection, blocked or not.
//
// One goroutine reads the server's messages and routes each response to
// its request by id, so any number of calls may be in flight from any
// number of goroutines. That reader never waits for the caller: a
// streaming Process buffers its output up to Options.MaxBufferedOutput
// (64 MiB by default; past it the command is cancelled and reads fail
// with ErrOutputOverflow), and the Events channel is buffered
// (Options.EventBuffer) with events dropped, and counted by DroppedEvents,
// when it is full.
//
// When the server goes away (the subprocess exits, the connection
// drops) every call in flight fails with an error matching ErrClosed that
// says why, Processes end with it, and the Events channel is closed.
// Errors from the server are *Error; they match the sentinels of their
// codes (ErrNotRunning, ErrUnsupported, ...) and, for files, fs.ErrNotExist,
// fs.ErrExist and fs.ErrPermission, with errors.Is.
package client
