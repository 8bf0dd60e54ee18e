// Drives `airlock mcp` with the official TypeScript MCP client, as an MCP
// host would: list the tools, create a sandbox, run commands, move a file,
// and make the mistakes a model makes. Prints one line per check and
// exits non-zero on the first failure.
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [airlock, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command: airlock, args: ["mcp", "--max-output", "4k", ...args], stderr: "inherit" });
const client = new Client({ name: "airlock-test", version: "1.0.0" });
await client.connect(transport);

const call = async (name, args) => {
  const res = await client.callTool({ name, arguments: args });
  return res;
};
const ok = (name, res) => {
  assert.ok(!res.isError, `${name}: ${JSON.stringify(res.content)}`);
  return res.structuredContent;
};

const { tools } = await client.listTools();
const names = tools.map((t) => t.name).sort();
assert.deepEqual(names, ["exec", "list_files", "policy_allow", "processes", "read_file", "sandbox_close", "sandbox_create", "write_file"]);
for (const t of tools) {
  assert.ok(t.description.length > 20, `${t.name} has a description`);
  assert.equal(t.inputSchema.type, "object");
}
console.log("tools", names.length);

const { sandbox_id } = ok("sandbox_create", await call("sandbox_create", {}));
assert.match(sandbox_id, /^sb-/);
console.log("created");

let r = ok("exec", await call("exec", { sandbox_id, command: "echo hello from $(uname -s)" }));
assert.equal(r.exit_code, 0);
assert.equal(r.stdout, "hello from Linux\n");
console.log("exec");

ok("write_file", await call("write_file", { sandbox_id, path: "/workspace/notes.txt", content: "line one\n" }));
r = ok("exec", await call("exec", { sandbox_id, command: "echo line two >> /workspace/notes.txt" }));
r = ok("read_file", await call("read_file", { sandbox_id, path: "/workspace/notes.txt" }));
assert.equal(r.content, "line one\nline two\n");
assert.ok(!r.truncated);
console.log("read_file");

// What runs in the background, seen through processes.
r = ok("exec", await call("exec", { sandbox_id, command: "exec sleep 1000", background: true }));
const bgPid = r.pid;
r = ok("processes", await call("processes", { sandbox_id }));
assert.ok(r.processes.some((p) => p.pid === bgPid && p.command === "sleep 1000"), JSON.stringify(r.processes));
console.log("processes");

// A huge output is cut, and the result says so.
r = ok("exec", await call("exec", { sandbox_id, command: "seq 1 1000000" }));
assert.ok(r.stdout_truncated, "stdout_truncated");
assert.ok(r.stdout.length <= 4096, `stdout is ${r.stdout.length} bytes`);
console.log("huge output");

// A tool that does not exist, and bad arguments: errors the model reads.
let bad = await client.callTool({ name: "delete_everything", arguments: {} }).then(
  (res) => res,
  (err) => ({ isError: true, content: [{ type: "text", text: String(err) }] }),
);
assert.ok(bad.isError, "unknown tool");
bad = await call("exec", { sandbox_id, command: 42 });
assert.ok(bad.isError, "bad argument type");
bad = await call("exec", { sandbox_id: "sb-0000", command: "true" });
assert.ok(bad.isError && /no sandbox/.test(bad.content[0].text), "unknown sandbox");
console.log("mistakes");

ok("sandbox_close", await call("sandbox_close", { sandbox_id }));
bad = await call("exec", { sandbox_id, command: "true" });
assert.ok(bad.isError, "exec after close");
console.log("closed");

// Left open: it closes when the client goes away.
ok("sandbox_create", await call("sandbox_create", {}));
await client.close();
console.log("done");
