// Command airlock-httpclient is the HTTP client of airlock-bench's egress
// section: it times HTTP requests and prints what it measured as JSON
// (see package bench/internal/httpclient). airlock-bench builds it
// statically and runs the same binary directly and inside a sandbox.
//
//	airlock-httpclient -mode keepalive|newconn|bulk [-n N] [-warmup N] [-warmup-url URL] [-dns IP:PORT] URL...
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/bench/internal/httpclient"
)

func main() {
	o, err := httpclient.ParseArgs("airlock-httpclient", os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-httpclient: %v\n", err)
		os.Exit(2)
	}
	res, err := httpclient.Run(context.Background(), o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-httpclient: %v\n", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-httpclient: %v\n", err)
		os.Exit(1)
	}
}
