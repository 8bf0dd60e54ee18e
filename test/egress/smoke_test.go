package egress_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testnet"
)

func TestCurlHTTPS(t *testing.T) {
	e := newEnv(t)
	sb := e.sandbox(t, e.network(testnet.API))
	out := ok(t, sb, "curl -sS --max-time 10 https://api.example.com/echo")
	if !strings.Contains(out, `"host"`) {
		t.Fatalf("unexpected answer: %s", out)
	}
}
