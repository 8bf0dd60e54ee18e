// Command network is README.md's example of a sandbox's network policy,
// as a program that runs: allowed hosts, a secret that only its host
// sees, an egress rule, a hook on requests and network events, a host
// allowed while the sandbox runs. Its test runs it and checks that
// README.md shows its code.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/policy"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	sb, err := airlock.Create(ctx, airlock.Config{Network: &policy.Config{
		AllowedHosts: []string{"api.openai.com", "*.githubusercontent.com"},
		Secrets: map[string]policy.Secret{
			"OPENAI_API_KEY": {Value: os.Getenv("OPENAI_API_KEY"), Hosts: []string{"api.openai.com"}},
		},
		Egress: []policy.EgressRule{{Destination: "github.com", Ports: []uint16{22}}}, // ssh
	}, OnRequest: func(ctx context.Context, r *policy.Request) (*policy.Request, error) {
		return r, nil // inspect, change, or return nil to block
	}, OnEvent: func(e airlock.Event) {
		if n := e.Network; n != nil {
			log.Println(n.Kind, n.Method, n.URL, n.StatusCode, n.Blocked, n.Reason)
		}
	}})
	if err != nil {
		return err
	}
	defer sb.Close()
	if err := sb.AllowHost("pypi.org"); err != nil { // while it runs; also `airlock policy ID allow pypi.org`
		return err
	}
	env := sb.Env() // OPENAI_API_KEY is a placeholder here, never the value
	fmt.Println("placeholder:", env["OPENAI_API_KEY"] != "" && env["OPENAI_API_KEY"] != os.Getenv("OPENAI_API_KEY"))
	res, err := sb.Exec(ctx, "printenv OPENAI_API_KEY")
	if err != nil {
		return err
	}
	fmt.Println("inside, the placeholder:", strings.TrimSpace(string(res.Stdout)) == env["OPENAI_API_KEY"])
	st, err := sb.NetworkStats() // leaves minted, pins, DNS answers cached, dropped events
	if err != nil {
		return err
	}
	fmt.Println("pins:", st.Pins)
	return nil
}
