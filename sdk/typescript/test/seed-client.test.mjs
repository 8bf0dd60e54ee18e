// The seed's TypeScript client ("Client Libraries" in
// shared/seeds/000_*.txt), copied at test time and changed only in the
// binary it runs (`sandbox` → this repository's bin/airlock), compiled with
// tsc and run: its own usage example, then write, exec, read, list and
// events through its class, on the standard image with a memory mount.
// Each run must end by itself, leaving no process behind.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { airlockBin, noAirlock, repoRoot, sdkDir, sessionPids, testImage, waitFor } from './helpers.mjs';

const seedsDir = resolve(repoRoot, '..', 'shared', 'seeds');

function seedClient() {
  if (!existsSync(seedsDir)) return { skip: `no seed texts at ${seedsDir} (CI has shared/ beside the clone)` };
  const f = readdirSync(seedsDir).filter((n) => /^000_.*\.txt$/.test(n)).sort()[0];
  if (!f) return { skip: `no 000_*.txt in ${seedsDir}` };
  const text = readFileSync(join(seedsDir, f), 'utf8');
  const at = text.indexOf('**TypeScript/Node.js:**');
  assert.ok(at >= 0, `${f}: no TypeScript client under "Client Libraries"`);
  const m = /```typescript\n([\s\S]*?)\n```/.exec(text.slice(at));
  assert.ok(m, `${f}: no typescript code block after "TypeScript/Node.js"`);
  return { file: f, code: m[1] };
}

const seed = seedClient();
const image = testImage('standard');
const skip = noAirlock ?? seed.skip ?? image.skip;

/** The seed's code with only its binary changed. */
function withBinary(code) {
  const from = "spawn('sandbox', ['--rpc']";
  assert.equal(code.split(from).length, 2, `the seed's client spawns ${from} exactly once`);
  return code.replace(from, `spawn(${JSON.stringify(airlockBin)}, ['--rpc']`);
}

/** Compiles name.ts in a fresh directory with tsc, as CommonJS; returns the .js path. */
function compile(dir, name, code) {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.ts`), code);
  writeFileSync(join(dir, 'package.json'), '{"type": "commonjs"}\n');
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'commonjs',
        esModuleInterop: true,
        strict: false,
        skipLibCheck: true,
        types: ['node'],
        typeRoots: [join(sdkDir, 'node_modules', '@types')],
        outDir: 'out',
      },
      files: [`${name}.ts`],
    }),
  );
  const r = spawnSync(process.execPath, [join(sdkDir, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir], { encoding: 'utf8' });
  assert.equal(r.status, 0, `tsc on the seed's client:\n${r.stdout}${r.stderr}`);
  return join(dir, 'out', `${name}.js`);
}

/** Runs a compiled program in a session of its own; checks it ends by itself and leaves nothing. */
async function runAlone(js, env) {
  const child = spawn(process.execPath, [js], {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, AIRLOCK_CACHE_DIR: image.dir, ...env },
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  const timer = setTimeout(() => {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {}
  }, 90000);
  const [code, signal] = await new Promise((r) => child.on('close', (c, s) => r([c, s])));
  clearTimeout(timer);
  const gone = await waitFor(() => sessionPids(child.pid).length === 0, 5000);
  const left = sessionPids(child.pid);
  if (!gone) {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {}
  }
  assert.equal(signal, null, `killed by ${signal} (hung?)\nstdout: ${out}\nstderr: ${err}`);
  assert.equal(code, 0, `exit status ${code}\nstdout: ${out}\nstderr: ${err}`);
  assert.deepEqual(left, [], `processes left behind: ${left.join(' ')}`);
  return { out, err };
}

const createConfig = `{
    image: 'standard',
    vfs: { mounts: { '/workspace': { type: 'memory' } } },
  }`;

test("the seed's TypeScript client runs its own usage example", { skip, timeout: 120000 }, async () => {
  const js = compile(join(sdkDir, 'build', 'seed-usage'), 'client', withBinary(seed.code));
  // Its example gives the sandbox a secret from $OPENAI_API_KEY for
  // api.openai.com; a stand-in value is enough, nothing is sent.
  const { out } = await runAlone(js, { OPENAI_API_KEY: 'sk-airlock-test-placeholder' });
  assert.match(out, /Hello from sandbox!/);
});

test("the seed's TypeScript client writes, runs, reads, lists and reports events", { skip, timeout: 120000 }, async () => {
  const code = withBinary(seed.code);
  const usage = code.indexOf('// Usage');
  assert.ok(usage > 0, "no '// Usage' in the seed's client");
  const driver = `
// Driver (the test's own): the seed's Sandbox class above, unchanged.
async function driver() {
  const sb = await Sandbox.create(${createConfig});
  const events: any[] = [];
  sb.onEvent((e: any) => events.push(e));
  await sb.writeFile('/workspace/hello.py', 'print("Hello from sandbox!")');
  const result = await sb.exec('python /workspace/hello.py');
  await sb.writeFile('/workspace/script.py', 'import json\\nwith open("/workspace/output.json", "w") as f:\\n    json.dump({"status": "ok"}, f)\\n');
  const script = await sb.exec('python /workspace/script.py');
  const output = (await sb.readFile('/workspace/output.json')).toString();
  const files = await sb.listFiles('/workspace');
  await sb.close();
  console.log(JSON.stringify({ result, script, output, files, events }));
}
driver().catch((e) => { console.error(e); process.exit(1); });
`;
  const js = compile(join(sdkDir, 'build', 'seed-driver'), 'client', code.slice(0, usage) + driver);
  const { out } = await runAlone(js);
  const r = JSON.parse(out.trim().split('\n').pop());
  assert.equal(r.result.exit_code, 0, JSON.stringify(r.result));
  assert.equal(r.result.stdout, 'Hello from sandbox!\n');
  assert.equal(r.script.exit_code, 0, JSON.stringify(r.script));
  assert.deepEqual(JSON.parse(r.output), { status: 'ok' });
  assert.deepEqual(r.files.map((f) => f.name).sort(), ['hello.py', 'output.json', 'script.py']);
  const hello = r.files.find((f) => f.name === 'hello.py');
  assert.equal(hello.size, 'print("Hello from sandbox!")'.length);
  assert.equal(hello.is_dir, false);
  const fileEvents = r.events.filter((e) => e.type === 'file');
  assert.ok(fileEvents.some((e) => e.file.op === 'write' && e.file.path === '/workspace/hello.py'), JSON.stringify(r.events));
  assert.ok(r.events.some((e) => e.type === 'exec' && e.exec.command.join(' ').includes('python /workspace/hello.py')), JSON.stringify(r.events));
});
