// @airlock/sdk against the real `airlock rpc` of this repository
// (bin/airlock, from make build): every method, concurrency, a large
// streamed transfer with flat memory, and the server's end.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { Writable } from 'node:stream';

import {
  AirlockError,
  AirlockNotInstalledError,
  Client,
  ClosedError,
  CommandFailedError,
  FileError,
  FileExistsError,
  FileNotFoundError,
  InvalidParamsError,
  MethodNotFoundError,
  NotFoundError,
  PolicyDeniedError,
  Sandbox,
  SandboxPausedError,
  UnsupportedError,
  findBinary,
} from '../dist/index.js';
import { airlockBin, alive, noAirlock, sdkDir, sessionPids, waitFor } from './helpers.mjs';

const skip = noAirlock;

describe('one sandbox', { skip }, () => {
  let sb;
  before(async () => {
    sb = await Sandbox.create({ resources: { memory_mb: 512, timeout_seconds: 600 } });
  });
  after(async () => {
    await sb?.close();
  });

  test('create describes the sandbox', () => {
    assert.match(sb.id, /^sb-/);
    assert.equal(typeof sb.isolation, 'string');
    assert.equal(typeof sb.env, 'object');
    assert.equal(sb.image.name, 'host');
  });

  test('exec: output as bytes and text, exit status, costs', async () => {
    const r = await sb.exec('printf hello; printf "\\377" >&2; exit 3');
    assert.equal(r.exitCode, 3);
    assert.ok(Buffer.isBuffer(r.stdout));
    assert.equal(r.stdoutText, 'hello');
    assert.deepEqual([...r.stderr], [0xff]);
    assert.equal(r.killedBy, null);
    assert.equal(r.ok, false);
    assert.equal(typeof r.durationMs, 'number');
    assert.equal(typeof r.peakMemoryBytes, 'number');
  });

  test('exec: argv, stdin, env, working dir, user', async () => {
    const r = await sb.exec(['sh', '-c', 'cat; echo "$FOO"; pwd; id -u'], {
      stdin: 'in\n',
      env: { FOO: 'bar' },
      workingDir: '/tmp',
      user: '1234',
    });
    assert.equal(r.stdoutText, 'in\nbar\n/tmp\n1234\n');
    assert.equal((await sb.run(['true'])).exitCode, 0);
  });

  test('exec: a timeout kills the command', async () => {
    const r = await sb.exec('sleep 30', { timeoutSeconds: 0.3 });
    assert.equal(r.killedBy, 'timeout');
  });

  test('exec: a command that cannot start is CommandFailedError', async () => {
    await assert.rejects(sb.exec(['/no/such/program']), (e) => {
      assert.ok(e instanceof CommandFailedError && e instanceof AirlockError, String(e));
      assert.equal(e.code, -32005);
      assert.equal(e.exitCode, 127);
      return true;
    });
  });

  test('exec: an AbortSignal cancels the command', async () => {
    const ac = new AbortController();
    const t0 = Date.now();
    setTimeout(() => ac.abort(), 200);
    await assert.rejects(sb.exec('sleep 30', { signal: ac.signal }), { name: 'AbortError' });
    assert.ok(Date.now() - t0 < 5000);
    // The server killed it: nothing sleeps on.
    await waitFor(async () => (await sb.exec('pgrep -x sleep || true')).stdoutText === '', 5000);
    assert.equal((await sb.exec('pgrep -x sleep || true')).stdoutText, '');
  });

  test('usage: memory against its limit, processes, CPU', async () => {
    await sb.exec('head -c 8388608 /dev/zero > /tmp/fill');
    const u = await sb.usage();
    assert.equal(u.memoryLimitBytes, 512 * 1024 * 1024);
    assert.ok(u.memoryBytes >= 8 * 1024 * 1024, JSON.stringify(u));
    assert.ok(u.pids >= 1 && u.pidsLimit > 0 && u.cpuNanos > 0, JSON.stringify(u));
    await sb.exec('rm /tmp/fill');
  });

  test('start: output streams in order, stdin is written and closed', async () => {
    const p = sb.start(['sh', '-c', 'echo one; echo two >&2; cat; echo three'], { openStdin: true });
    await p.write('typed\n');
    await p.closeStdin();
    // Each stream in order (the two are separate pipes, in no order between them).
    const got = { stdout: '', stderr: '' };
    for await (const c of p) got[c.stream] += c.data;
    assert.deepEqual(got, { stdout: 'one\ntyped\nthree\n', stderr: 'two\n' });
    const r = await p.wait();
    assert.equal(r.exitCode, 0);
  });

  test('start: output iterated only after the command has ended is all there, and in wait too', async () => {
    const p = sb.start(['sh', '-c', 'echo one; echo two >&2']);
    const r = await p.wait();
    const got = { stdout: '', stderr: '' };
    for await (const c of p) got[c.stream] += c.data;
    assert.deepEqual(got, { stdout: 'one\n', stderr: 'two\n' });
    assert.equal(r.stdoutText, 'one\n');
    assert.equal(r.stderrText, 'two\n');
  });

  test('start: stdin from an iterable, output kept for wait when not iterated', async () => {
    async function* src() {
      yield 'a';
      yield Buffer.from('b');
      yield new Uint8Array([0x63]);
    }
    const p = sb.start('cat; echo err >&2', { stdin: src() });
    const r = await p.wait();
    assert.equal(r.stdoutText, 'abc');
    assert.equal(r.stderrText, 'err\n');
  });

  test('start: signal, cancel and an AbortSignal end the command', async () => {
    const p1 = sb.start(['sleep', '30']);
    await new Promise((r) => setTimeout(r, 100));
    await p1.signal('TERM');
    const r1 = await p1.wait();
    assert.equal(r1.killedBy, 'signal');
    assert.equal(r1.signal, 15);

    const p2 = sb.start(['sleep', '30']);
    await new Promise((r) => setTimeout(r, 100));
    await p2.cancel();
    assert.equal((await p2.wait()).killedBy, 'signal');

    const ac = new AbortController();
    const p3 = sb.start(['sleep', '30'], { signal: ac.signal });
    setTimeout(() => ac.abort(), 100);
    await assert.rejects(p3.wait(), { name: 'AbortError' });
  });

  test('startDetached: the command runs on, with its given stdin', async () => {
    const pid = await sb.startDetached('sleep 1000');
    assert.ok(pid > 0);
    assert.equal((await sb.exec(['kill', '-0', String(pid)])).exitCode, 0);
    await sb.startDetached('cat > /tmp/detached-in', { stdin: 'given' });
    const deadline = Date.now() + 30000;
    while ((await sb.exec('cat /tmp/detached-in')).stdoutText !== 'given') {
      assert.ok(Date.now() < deadline, 'the detached command did not read its stdin');
      await new Promise((r) => setTimeout(r, 100));
    }
    await assert.rejects(sb.startDetached(['/no/such/program']), (e) => e.exitCode === 127);
  });

  test('pause and resume: a paused sandbox refuses exec, and goes on once resumed', async () => {
    const pid = await sb.startDetached('exec sleep 1000');
    await sb.pause();
    await assert.rejects(sb.exec('true'), (e) => e instanceof SandboxPausedError && /resume it first/.test(e.message));
    await assert.rejects(sb.readFile('/etc/hostname'), SandboxPausedError);
    await assert.rejects(sb.pause(), /already/);
    await sb.resume();
    assert.equal((await sb.exec(['kill', '-0', String(pid)])).exitCode, 0);
    const top = await sb.processes();
    assert.deepEqual(top.find((p) => p.pid === pid)?.command, ['sleep', '1000']);
    await assert.rejects(sb.resume(), (e) => e instanceof SandboxPausedError && /not paused/.test(e.message));
  });

  test('start: a TTY is resized', async () => {
    const p = sb.start(['sh', '-c', 'stty size; read x; stty size'], { tty: true, rows: 10, cols: 20, openStdin: true });
    let out = '';
    let resized = false;
    for await (const c of p) {
      out += c.data;
      if (!resized && /10 20/.test(out)) {
        resized = true;
        await p.resize(33, 77);
        await p.write('go\n');
      }
    }
    assert.match(out, /10 20[\s\S]*33 77/);
    assert.equal((await p.wait()).exitCode, 0);
  });

  test('files: write, read, stat, list, mkdir, remove, symlink, set_attr', async () => {
    await sb.mkdir('/tmp/d/e', { parents: true, mode: 0o700 });
    assert.equal(await sb.writeFile('/tmp/d/e/f.txt', 'héllo', { mode: 0o600 }), 6);
    assert.equal((await sb.readFile('/tmp/d/e/f.txt')).toString(), 'héllo');
    const st = await sb.stat('/tmp/d/e/f.txt');
    assert.equal(st.size, 6);
    assert.equal(st.mode & 0o777, 0o600);
    assert.equal(st.isDir, false);
    assert.ok(st.modTime instanceof Date && !isNaN(st.modTime.getTime()));
    assert.equal((await sb.stat('/tmp/d/e')).isDir, true);
    await sb.symlink('f.txt', '/tmp/d/e/link');
    const when = new Date('2020-01-02T03:04:05Z');
    await sb.setAttr('/tmp/d/e/f.txt', { mode: 0o640, modTime: when });
    const ls = await sb.listFiles('/tmp/d/e');
    assert.deepEqual(ls.map((f) => f.name).sort(), ['f.txt', 'link']);
    const f = ls.find((x) => x.name === 'f.txt');
    assert.equal(f.mode & 0o777, 0o640);
    assert.equal(f.modTime.getTime(), when.getTime());
    assert.equal(ls.find((x) => x.name === 'link').link, 'f.txt');
    await assert.rejects(sb.mkdir('/tmp/d'), FileExistsError);
    await assert.rejects(sb.remove('/tmp/d'), (e) => e instanceof FileError && e.kind === 'not_empty');
    await sb.remove('/tmp/d', { recursive: true });
    await assert.rejects(sb.readFile('/tmp/d/e/f.txt'), (e) => {
      assert.ok(e instanceof FileNotFoundError && e instanceof FileError);
      assert.equal(e.code, -32006);
      assert.equal(e.kind, 'not_found');
      assert.equal(e.posixCode, 'ENOENT');
      return true;
    });
    await assert.rejects(sb.stat('/tmp/d'), FileNotFoundError);
  });

  test('files: parts at an offset, in place', async () => {
    await sb.writeFile('/tmp/p', '0123456789');
    await sb.writeFileAt('/tmp/p', 2, 'ab');
    assert.equal((await sb.readFile('/tmp/p')).toString(), '01ab456789');
    await sb.writeFileAt('/tmp/p', 4, 'XY', { truncate: true });
    assert.equal((await sb.readFile('/tmp/p')).toString(), '01abXY');
    const { data, fileSize } = await sb.readFileAt('/tmp/p', 1, 3);
    assert.equal(data.toString(), '1ab');
    assert.equal(fileSize, 6);
    await assert.rejects(sb.readFile('/tmp/p', { maxBytes: 2 }), (e) => e instanceof FileError && e.kind === 'too_large');
  });

  test('files: binary content survives both ways, large and empty', async () => {
    const big = Buffer.alloc(3 << 20);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7919) & 0xff;
    await sb.writeFile('/tmp/bin', big);
    assert.ok((await sb.readFile('/tmp/bin')).equals(big));
    // Larger than one part: the rest comes through a host file the
    // server writes, which is gone afterwards.
    const huge = Buffer.alloc(19 * (1 << 20) + 4320);
    for (let i = 0; i < huge.length; i += 4) huge.writeUInt32LE(i, i);
    await sb.writeFile('/tmp/huge', huge);
    const tmpBefore = readdirSync(tmpdir()).filter((n) => n.startsWith('airlock-read-')).length;
    assert.ok((await sb.readFile('/tmp/huge')).equals(huge));
    assert.equal(sb.client.hostFiles, true);
    assert.equal(readdirSync(tmpdir()).filter((n) => n.startsWith('airlock-read-')).length, tmpBefore);
    // Without host files (a server on another host): in parts, several
    // at once, into one buffer.
    sb.client.hostFiles = false;
    try {
      assert.ok((await sb.readFile('/tmp/huge')).equals(huge));
    } finally {
      sb.client.hostFiles = true;
    }
    await assert.rejects(sb.readFile('/tmp/huge', { maxBytes: 9 << 20 }), (e) => e instanceof FileError && e.kind === 'too_large');
    assert.equal((await sb.readFile('/tmp/huge', { maxBytes: 20 << 20 })).length, huge.length);
    await sb.writeFile('/tmp/empty', '');
    assert.equal((await sb.readFile('/tmp/empty')).length, 0);
  });

  test('files: streamed upload and download of a few chunks', async () => {
    const n = 2 * (8 << 20) + 12345;
    const hash = createHash('sha256');
    async function* gen() {
      let left = n;
      let k = 0;
      while (left > 0) {
        const b = Buffer.alloc(Math.min(left, 1000003), k++ & 0xff);
        hash.update(b);
        left -= b.length;
        yield b;
      }
    }
    assert.equal(await sb.writeFileFrom('/tmp/up', gen()), n);
    const want = hash.digest('hex');
    const r = await sb.exec('sha256sum /tmp/up');
    assert.equal(r.stdoutText.split(' ')[0], want);
    const h2 = createHash('sha256');
    let got = 0;
    const sink = new Writable({
      write(chunk, _enc, cb) {
        h2.update(chunk);
        got += chunk.length;
        cb();
      },
    });
    assert.equal(await sb.readFileTo('/tmp/up', sink), n);
    assert.equal(got, n);
    assert.equal(h2.digest('hex'), want);
    assert.equal(await sb.writeFileFrom('/tmp/up0', []), 0);
    assert.equal((await sb.stat('/tmp/up0')).size, 0);
  });

  test('events: callbacks and an iterator, by type', async () => {
    const seen = [];
    const off = sb.onEvent((e) => seen.push(e));
    const it = sb.events({ types: ['file'] });
    await sb.writeFile('/tmp/ev', 'x');
    await sb.exec('true');
    const first = await it.next();
    assert.equal(first.value.type, 'file');
    assert.equal(first.value.file.op, 'write');
    assert.equal(first.value.file.path, '/tmp/ev');
    assert.equal(first.value.sandboxId, sb.id);
    await it.return();
    await waitFor(() => seen.some((e) => e.type === 'exec'), 5000);
    off();
    const ex = seen.find((e) => e.type === 'exec');
    assert.deepEqual(ex.exec.command, ['/bin/sh', '-c', 'true']);
    assert.equal(ex.exec.exitCode, 0);
    assert.equal(typeof ex.timestamp, 'number');
  });

  test('events.subscribe selects the types delivered', async () => {
    assert.deepEqual(await sb.client.subscribe('exec'), ['exec']);
    const seen = [];
    const off = sb.onEvent((e) => seen.push(e.type));
    await sb.writeFile('/tmp/ev2', 'x');
    await sb.exec('true');
    await waitFor(() => seen.includes('exec'), 5000);
    off();
    assert.ok(!seen.includes('file'), seen.join());
    await sb.client.unsubscribe();
    await sb.client.subscribe();
  });

  test('concurrency: many commands and file operations at once', async () => {
    const jobs = [];
    for (let i = 0; i < 40; i++) {
      jobs.push(sb.exec(`echo ${i}`).then((r) => assert.equal(r.stdoutText, `${i}\n`)));
      jobs.push(
        sb.writeFile(`/tmp/c${i}`, `v${i}`).then(async () => assert.equal((await sb.readFile(`/tmp/c${i}`)).toString(), `v${i}`)),
      );
    }
    const streams = [];
    for (let i = 0; i < 8; i++) {
      const p = sb.start(['sh', '-c', `for j in 1 2 3; do echo ${i}.$j; done`]);
      streams.push(
        (async () => {
          let s = '';
          for await (const c of p) s += c.data;
          assert.equal(s, `${i}.1\n${i}.2\n${i}.3\n`);
        })(),
      );
    }
    await Promise.all([...jobs, ...streams]);
  });

  test('info and errors by code', async () => {
    const info = await sb.client.info();
    assert.equal(info.protocol, 1);
    assert.ok(info.sandboxes.some((s) => s.sandboxId === sb.id && s.state === 'running' && s.pid > 0));
    await assert.rejects(sb.client.call('no_such_method', {}), MethodNotFoundError);
    await assert.rejects(sb.client.call('exec', { sandbox_id: 'sb-000000000000', command: 'true' }), NotFoundError);
    await assert.rejects(sb.client.call('stat', { sandbox_id: sb.id, path: '/', bogus: 1 }), (e) => {
      assert.ok(e instanceof InvalidParamsError);
      assert.match(e.message, /bogus/);
      return true;
    });
    await assert.rejects(sb.policy.allow('example.com'), UnsupportedError);
  });
});

describe('sessions and lifetimes', { skip }, () => {
  test('a client holds several sandboxes, working at once', async () => {
    const c = await Client.start();
    try {
      const [a, b] = await Promise.all([c.create(), c.create()]);
      assert.notEqual(a.id, b.id);
      const [ra, rb] = await Promise.all([a.exec('hostname; echo a'), b.exec('echo b')]);
      assert.match(ra.stdoutText, /a\n$/);
      assert.equal(rb.stdoutText, 'b\n');
      const all = [];
      const off = c.onEvent((e) => all.push(e.sandboxId));
      await Promise.all([a.exec('true'), b.exec('true')]);
      await waitFor(() => all.includes(a.id) && all.includes(b.id), 5000);
      off();
      await a.close();
      // b lives on in the same session.
      assert.equal((await b.exec('echo still')).stdoutText, 'still\n');
      const info = await c.info();
      assert.deepEqual(info.sandboxes.map((s) => s.sandboxId), [b.id]);
      await assert.rejects(a.exec('true'), AirlockError);
      const pid = info.sandboxes[0].pid;
      await c.close();
      assert.ok(await waitFor(() => !alive(pid), 5000), 'the sandbox ends with its client');
      await assert.rejects(b.exec('true'), ClosedError);
    } finally {
      await c.close();
    }
  });

  test("Sandbox.create's server ends when the sandbox is closed; await using closes it", async () => {
    let pid;
    let sbPid;
    {
      const sb = await Sandbox.create();
      pid = sb.client.pid;
      sbPid = (await sb.client.info()).sandboxes[0].pid;
      assert.ok(alive(pid) && alive(sbPid));
      await sb[Symbol.asyncDispose]();
      await sb.close();
    }
    assert.ok(!alive(pid), 'airlock rpc is gone');
    assert.ok(await waitFor(() => !alive(sbPid), 5000), 'the sandbox is gone');
  });

  for (const how of ['SIGKILL', 'exit', 'forgets']) {
    test(`the server and sandbox end when node ends (${how})`, async () => {
      const prog = `
        import { Sandbox } from ${JSON.stringify(`${sdkDir}/dist/index.js`)};
        const sb = await Sandbox.create();
        await sb.exec('true');
        const info = await sb.client.info();
        console.log(JSON.stringify({ server: sb.client.pid, sandbox: info.sandboxes[0].pid }));
        ${how === 'SIGKILL' ? 'setInterval(() => {}, 1000);' : how === 'exit' ? 'process.exit(0);' : ''}
      `;
      const child = spawn(process.execPath, ['--input-type=module', '-e', prog], { detached: true, stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
        if (how === 'SIGKILL' && out.includes('\n')) child.kill('SIGKILL');
      });
      const timer = setTimeout(() => process.kill(-child.pid, 'SIGKILL'), 60000);
      const [code, sig] = await new Promise((r) => child.on('close', (c, s) => r([c, s])));
      clearTimeout(timer);
      if (how === 'SIGKILL') assert.equal(sig, 'SIGKILL');
      else assert.equal(code, 0, 'node exits by itself');
      const { server, sandbox } = JSON.parse(out);
      assert.ok(await waitFor(() => !alive(server) && !alive(sandbox), 10000), `left: ${sessionPids(child.pid)}`);
      assert.ok(await waitFor(() => sessionPids(child.pid).length === 0, 5000), `left: ${sessionPids(child.pid)}`);
    });
  }

  test('create refuses bad params before starting anything', async () => {
    await assert.rejects(Sandbox.create({ resources: { memory_mbs: 1 } }), (e) => {
      assert.ok(e instanceof InvalidParamsError);
      assert.match(e.message, /memory_mbs/);
      return true;
    });
  });

  test('a missing airlock says how to install it', () => {
    const saved = { bin: process.env.AIRLOCK_BIN, path: process.env.PATH };
    try {
      delete process.env.AIRLOCK_BIN;
      process.env.PATH = '/nonexistent';
      assert.throws(() => findBinary(), (e) => e instanceof AirlockNotInstalledError && /make build && sudo make install/.test(e.message) && /AIRLOCK_BIN/.test(e.message));
      process.env.AIRLOCK_BIN = '/nonexistent/airlock';
      assert.throws(() => findBinary(), AirlockNotInstalledError);
    } finally {
      process.env.AIRLOCK_BIN = saved.bin;
      process.env.PATH = saved.path;
    }
    assert.equal(findBinary(), airlockBin);
  });
});

describe('network policy', { skip }, () => {
  test('allow, deny, remove and get', async (t) => {
    let sb;
    try {
      sb = await Sandbox.create({ network: {} });
    } catch (e) {
      if (e instanceof UnsupportedError) return t.skip(`no network here: ${e.message}`);
      throw e;
    }
    try {
      assert.deepEqual(await sb.policy.get(), { allowedHosts: [], deniedHosts: [] });
      assert.deepEqual((await sb.policy.allow('API.Example.com.')).allowedHosts, ['api.example.com']);
      assert.deepEqual((await sb.allowHost('*.example.org')).allowedHosts, ['api.example.com', '*.example.org']);
      assert.deepEqual((await sb.policy.deny('bad.example.org')).deniedHosts, ['bad.example.org']);
      assert.deepEqual(await sb.removeHost('api.example.com'), { allowedHosts: ['*.example.org'], deniedHosts: ['bad.example.org'] });
      await assert.rejects(sb.policy.remove('never.example'), NotFoundError);
      await assert.rejects(sb.policy.allow('not a host'), InvalidParamsError);
      assert.deepEqual(await sb.hosts(), await sb.policy.get());
      // A host not allowed is refused, and the refusal is an event.
      const it = sb.events({ types: ['network'] });
      const r = await sb.exec('getent hosts denied.example.net || echo refused');
      assert.match(r.stdoutText, /refused/);
      const ev = await Promise.race([it.next(), new Promise((res) => setTimeout(() => res({ value: undefined }), 5000))]);
      await it.return();
      if (ev.value) {
        assert.equal(ev.value.type, 'network');
        assert.equal(ev.value.network.blocked, true);
      }
      void PolicyDeniedError;
    } finally {
      await sb.close();
    }
  });
});

// readFrom connects to host:port and reads to the end, retrying until
// something answers.
async function readFrom(host, port) {
  for (let i = 0; i < 300; i++) {
    const got = await new Promise((resolve) => {
      const chunks = [];
      const c = connect({ host, port });
      c.on('data', (d) => chunks.push(d));
      c.on('end', () => resolve(Buffer.concat(chunks).toString()));
      c.on('error', () => resolve(''));
    });
    if (got) return got;
    await new Promise((r) => setTimeout(r, 50));
  }
  return '';
}

describe('published ports', { skip }, () => {
  test('create ports, portForward and portForwardClose', async (t) => {
    let sb;
    try {
      sb = await Sandbox.create({ ports: [{ sandbox_port: 8000 }] });
    } catch (e) {
      if (e instanceof UnsupportedError) return t.skip(`no network here: ${e.message}`);
      throw e;
    }
    try {
      assert.equal(sb.ports.length, 1);
      assert.equal(sb.ports[0].hostIp, '127.0.0.1');
      assert.equal(sb.ports[0].sandboxPort, 8000);
      const server = 'import socket\ns = socket.socket(); s.bind(("0.0.0.0", 8000)); s.listen(8)\n' +
        'while True:\n    c, _ = s.accept(); c.sendall(b"hello"); c.close()\n';
      const p = sb.start(['python3', '-c', server]);
      assert.equal(await readFrom(sb.ports[0].hostIp, sb.ports[0].hostPort), 'hello');
      const pf = await sb.portForward(8000, { hostIp: '127.0.0.1' });
      assert.equal(pf.protocol, 'tcp');
      assert.notEqual(pf.hostPort, sb.ports[0].hostPort);
      assert.equal(await readFrom(pf.hostIp, pf.hostPort), 'hello');
      assert.deepEqual(await sb.portForwardClose(pf.hostPort), [pf]);
      await assert.rejects(sb.portForwardClose(pf.hostPort), NotFoundError);
      await assert.rejects(sb.portForward(53, { protocol: 'udp' }), InvalidParamsError);
      await p.cancel().catch(() => {});
    } finally {
      await sb.close();
    }
  });

  test('a sandbox without network publishes nothing', async () => {
    const sb = await Sandbox.create({});
    try {
      await assert.rejects(sb.portForward(8000), (e) => e instanceof UnsupportedError && /publishing ports needs/.test(e.message));
    } finally {
      await sb.close();
    }
  });
});

describe('pools', { skip }, () => {
  test('a pool of 2 hands out 3 sandboxes in a row that each run a command', { timeout: 120000 }, async () => {
    const client = await Client.start();
    try {
      const pool = await client.poolCreate(2, { env: { FROM: 'pool' }, resources: { memory_mb: 256 } });
      assert.match(pool, /^pool-/);
      const ids = new Set();
      for (let i = 0; i < 3; i++) {
        const sb = await client.create({ pool });
        try {
          const r = await sb.exec(`test -e /tmp/mark && echo reused; touch /tmp/mark; echo ${i} $FROM`);
          assert.equal(r.stdoutText, `${i} pool\n`);
          ids.add(sb.id);
        } finally {
          await sb.close();
        }
      }
      assert.equal(ids.size, 3);
      const pools = await client.poolList();
      assert.deepEqual(pools.map((p) => [p.poolId, p.size]), [[pool, 2]]);
      await client.poolClose(pool);
      assert.deepEqual(await client.poolList(), []);
      await assert.rejects(client.create({ pool }));
    } finally {
      await client.close();
    }
  });
});
