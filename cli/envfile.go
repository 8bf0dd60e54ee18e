package cli

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/term"
)

// maxEnvFile bounds an --env-file.
const maxEnvFile = 1 << 20

// readEnvFiles reads --env-file files as docker does: a KEY=VALUE per
// line, the value taken as it is (no quotes, no expansion); a bare KEY
// copies this process's $KEY when it is set; blank lines and lines
// starting with # are skipped. It returns the entries in order, in -e's
// form, to go before the -e flags (which win).
func readEnvFiles(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("--env-file: %w", err)
		}
		fi, err := f.Stat()
		if err == nil && fi.Size() > maxEnvFile {
			err = fmt.Errorf("it is larger than %d bytes", maxEnvFile)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("--env-file %s: %w", p, err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), maxEnvFile)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimLeft(sc.Text(), " \t")
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, _, _ := strings.Cut(line, "=")
			if k == "" || strings.ContainsAny(k, " \t") {
				f.Close()
				return nil, fmt.Errorf("--env-file %s, line %d: %q is not KEY=VALUE (a variable's name has no spaces)", p, n, line)
			}
			out = append(out, line)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("--env-file %s: %w", p, err)
		}
	}
	return out, nil
}

// checkTTY refuses -t with -i when stdin is not a terminal, as docker
// does: there is no terminal to give the command.
func checkTTY(tty, interactive bool) error {
	if tty && interactive && !term.IsTerminal(int(os.Stdin.Fd())) {
		return fmt.Errorf("the input device is not a TTY: -t with -i needs a terminal on stdin; to pipe input to the command, drop -t")
	}
	return nil
}
