// Command airlock runs untrusted code in sandboxes.
package main

import "github.com/airlock-sandbox/airlock/cli"

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { cli.Main(cli.Options{Version: version}) }
