package cli

import (
	"regexp"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
)

// The JSON-RPC server, which also serves the CLI through a sandbox's
// control socket, words its errors for JSON-RPC clients: it names
// methods and params. cliWords says the same in the CLI's words, so that
// a CLI user is never sent to a method they cannot call.

// rpcMethods are the method names that may appear in a server's message.
var rpcMethods = []string{
	api.MethodCreate, api.MethodExec, api.MethodExecStream, api.MethodStdin, api.MethodSignal,
	api.MethodResize, api.MethodCancel, api.MethodWriteFile, api.MethodReadFile, api.MethodListFiles,
	api.MethodStat, api.MethodMkdir, api.MethodRemove, api.MethodSymlink, api.MethodSetAttr,
	api.MethodClose, api.MethodSubscribe, api.MethodUnsubscribe, api.MethodInfo, api.MethodAttach,
	api.MethodPolicyGet, api.MethodPolicyAllow, api.MethodPolicyDeny, api.MethodPolicyRemove, api.MethodStats,
}

// cliWording holds the compiled rewrites.
type cliWording struct {
	prefix  *regexp.Regexp // "airlock stat: ", "write_file params: ", "policy.remove: "
	code    *regexp.Regexp // " (code -32006)"
	phrases *strings.Replacer
}

func newCLIWording() *cliWording {
	var all, distinct []string
	for _, m := range rpcMethods {
		q := regexp.QuoteMeta(m)
		all = append(all, q)
		// Names that are also plain words ("stat", "exec") are taken
		// out only where they stand as a method ("airlock stat: ").
		if strings.ContainsAny(m, "._") {
			distinct = append(distinct, q)
		}
	}
	alt, dalt := strings.Join(all, "|"), strings.Join(distinct, "|")
	return &cliWording{
		prefix: regexp.MustCompile(`airlock (?:` + alt + `): |\b(?:` + alt + `) params: |\b(?:` + dalt + `): `),
		code:   regexp.MustCompile(` \(code -?\d+\)`),
		phrases: strings.NewReplacer(
			"(list_files shows what exists)", "(ls in the sandbox shows what exists)",
			"list it with list_files, or remove it with recursive true", "copy it as a directory, or remove it with airlock exec ID -- rm -r",
			"remove it with recursive true", "remove it with airlock exec ID -- rm -r",
			"raise max_bytes, or read it in parts with exec (for example with dd)", "copy it with airlock cp, which reads it in parts",
			"create the sandbox with a larger disk_mb", "start the sandbox with a larger --disk",
			"use command to run it through /bin/sh", "run it through a shell (-- sh -c '...')",
			"fix the command, its environment or working_dir", "fix the command, its environment or its -w directory",
			"call create first", "start one with airlock run -d",
			"call create to start a new one", "start a new one with airlock run -d",
			"create a new sandbox", "start a new one with airlock run -d",
			"close the sandbox and create a new one", "remove it (airlock rm -f ID) and start a new one",
			"run commands with exec_stream", "run commands with airlock exec",
			"allowed_hosts nor denied_hosts", "the allowed nor the denied hosts",
			api.MethodPolicyGet+" lists them", "airlock policy ID lists them",
			"and "+api.MethodPolicyAllow+" then adds hosts", "and airlock policy ID allow then adds hosts",
			"created without \"network\"", "started without a network",
			"resume it first (airlock unpause, or the RPC method resume)", "unpause it first (airlock unpause ID)",
			"create a sandbox with a network object (an empty one, {}, allows nothing,", "start one with a network flag (--allow-host; an empty --network-config allows nothing,",
		),
	}
}

// words rewrites one message.
func (w *cliWording) words(s string) string {
	s = w.code.ReplaceAllString(s, "")
	s = w.prefix.ReplaceAllString(s, "")
	return w.phrases.Replace(s)
}
