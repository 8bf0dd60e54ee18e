// Benchmark of @airlock/sdk next to the Go client, in one run: the round
// trip of exec `true` and a 64 MiB read_file, each SDK against its own
// `airlock rpc` and sandbox, their rounds alternated so that the machine's
// drift stays out of the ratio. Goals: the SDK's exec round trip within
// 1.5x the Go client's (medians), and read_file at 150 MB/s or more.
//
//   node bench/bench.mjs [--rounds 10] [--execs 50] [--size 67108864]
//
// Needs bin/airlock (make build) and go (for the Go side,
// bench/cmd/airlock-sdkbench -serve). Prints a table, then one JSON line.

import { spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { mkdirSync } from 'node:fs';

import { Sandbox } from '../dist/index.js';
import { airlockBin, repoRoot, sdkDir } from '../test/helpers.mjs';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '10' },
    execs: { type: 'string', default: '50' },
    size: { type: 'string', default: String(64 << 20) },
  },
});
const rounds = Number(values.rounds);
const execs = Number(values.execs);
const size = Number(values.size);

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}

// The Go side.
mkdirSync(join(sdkDir, 'build'), { recursive: true });
const goBin = join(sdkDir, 'build', 'airlock-sdkbench');
const built = spawnSync('go', ['build', '-o', goBin, './bench/cmd/airlock-sdkbench'], { cwd: repoRoot, stdio: 'inherit' });
if (built.status !== 0) throw new Error('building bench/cmd/airlock-sdkbench failed');
const go = spawn(goBin, ['-serve', '-airlock', airlockBin, '-size', String(size)], { stdio: ['pipe', 'pipe', 'inherit'] });
const goLines = createInterface({ input: go.stdout })[Symbol.asyncIterator]();
async function goLine() {
  const r = await goLines.next();
  if (r.done) throw new Error('airlock-sdkbench -serve ended');
  return r.value;
}
async function goAsk(cmd) {
  go.stdin.write(`${cmd}\n`);
  return JSON.parse(await goLine());
}

// The SDK's side.
const sb = await Sandbox.create({ resources: { memory_mb: 1024 }, disk_mb: 256 });
const data = Buffer.alloc(size);
for (let i = 0; i < size; i++) data[i] = (i * 7) & 0xff;
await sb.writeFile('/tmp/bench.bin', data);
if ((await goLine()) !== 'ready') throw new Error('airlock-sdkbench -serve did not start');

async function tsExec(n) {
  const ms = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await sb.exec(['true']);
    ms.push(performance.now() - t);
  }
  return ms;
}
async function tsRead() {
  const t = performance.now();
  const b = await sb.readFile('/tmp/bench.bin');
  const dt = (performance.now() - t) / 1000;
  if (b.length !== size) throw new Error(`read ${b.length} bytes, want ${size}`);
  return size / dt / 1e6;
}

// Warm up both.
await tsExec(20);
await goAsk('exec 20');
await tsRead();
await goAsk('read 1');

const res = { goExec: [], tsExec: [], goRead: [], tsRead: [] };
for (let r = 0; r < rounds; r++) {
  const order = r % 2 ? ['ts', 'go'] : ['go', 'ts'];
  for (const who of order) {
    if (who === 'go') res.goExec.push(...(await goAsk(`exec ${execs}`)).ms);
    else res.tsExec.push(...(await tsExec(execs)));
  }
  for (const who of order) {
    if (who === 'go') res.goRead.push(...(await goAsk('read 1')).mbps);
    else res.tsRead.push(await tsRead());
  }
}
go.stdin.end();
await sb.close();
await new Promise((r) => go.on('close', r));

const ratio = median(res.tsExec) / median(res.goExec);
const mbps = median(res.tsRead);
const out = {
  exec_true_ms: { ts_p50: median(res.tsExec), ts_p95: pct(res.tsExec, 0.95), go_p50: median(res.goExec), go_p95: pct(res.goExec, 0.95) },
  exec_ratio_p50: ratio,
  read_file_mbps: { size, ts_p50: mbps, go_p50: median(res.goRead) },
  goals: { exec_ratio: ratio <= 1.5 ? 'met' : 'not met', read_file: mbps >= 150 ? 'met' : 'not met' },
  rounds,
  execs_per_round: execs,
};
const f = (x) => x.toFixed(2);
console.log(`| measurement (${rounds} alternated rounds) | TypeScript SDK | Go client | goal | verdict |`);
console.log('|---|--:|--:|---|---|');
console.log(`| exec round trip of \`true\`, p50 (p95) | ${f(out.exec_true_ms.ts_p50)} ms (${f(out.exec_true_ms.ts_p95)}) | ${f(out.exec_true_ms.go_p50)} ms (${f(out.exec_true_ms.go_p95)}) | ≤ 1.5x Go | ${f(ratio)}x, ${out.goals.exec_ratio} |`);
console.log(`| \`read_file\` of ${size >> 20} MiB, p50 | ${mbps.toFixed(0)} MB/s | ${out.read_file_mbps.go_p50.toFixed(0)} MB/s | ≥ 150 MB/s | ${out.goals.read_file} |`);
console.log(JSON.stringify(out));
