package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// seconds is a duration flag that also takes a bare number of seconds
// ("30" is 30s), as --memory takes a bare number of MiB.
type seconds struct{ d *time.Duration }

func (s seconds) String() string {
	if s.d == nil || *s.d == 0 {
		return "0s"
	}
	return s.d.String()
}

func (s seconds) Set(v string) error {
	v = strings.TrimSpace(v)
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n < 0 || n > float64(1<<62)/float64(time.Second) {
			return fmt.Errorf("%q: give a duration from 0 (30 or 30s, 5m, 1h30m)", v)
		}
		*s.d = time.Duration(n * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is not a duration: give seconds (30) or a unit (30s, 5m, 1h30m)", v)
	}
	*s.d = d
	return nil
}

func (s seconds) Type() string { return "duration" }

// durationVar registers a seconds flag.
func durationVar(fl *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fl.Var(seconds{p}, name, usage)
}
