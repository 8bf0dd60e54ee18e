// A large file streamed both ways through @airlock/sdk with the client's
// memory flat: 384 MiB down (readFileStream) and up (writeFileFrom),
// checked by hash against sha256sum inside the sandbox.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';

import { Sandbox } from '../dist/index.js';
import { noAirlock } from './helpers.mjs';

const SIZE = 384 << 20;
const MiB = 1 << 20;
// Two 8 MiB chunks in flight, each briefly as its base64 line, its text
// and its bytes, with what the collector has not yet taken back: about
// 100 MiB, whatever the file's size.
const FLAT = 160 * MiB;

test('384 MiB streamed down and up with flat memory', { skip: noAirlock, timeout: 300000 }, async () => {
  const sb = await Sandbox.create({ resources: { memory_mb: 2048 }, disk_mb: 1024 });
  try {
    const made = await sb.exec(`head -c ${SIZE} /dev/urandom > /tmp/big && sha256sum /tmp/big`);
    assert.equal(made.exitCode, 0, made.stderrText);
    const want = made.stdoutText.split(' ')[0];

    // Warm up the read path, then measure from there.
    for await (const _ of sb.readFileStream('/tmp/big')) break;
    const base = process.memoryUsage().rss;
    let peak = base;
    const h = createHash('sha256');
    let n = 0;
    const t0 = performance.now();
    for await (const chunk of sb.readFileStream('/tmp/big')) {
      h.update(chunk);
      n += chunk.length;
      peak = Math.max(peak, process.memoryUsage().rss);
    }
    const secs = (performance.now() - t0) / 1000;
    assert.equal(n, SIZE);
    assert.equal(h.digest('hex'), want);
    console.log(`download: ${(SIZE / MiB / secs).toFixed(0)} MiB/s, rss grew ${((peak - base) / MiB).toFixed(0)} MiB`);
    assert.ok(peak - base < FLAT, `rss grew ${(peak - base) / MiB} MiB reading ${SIZE / MiB} MiB`);

    await sb.remove('/tmp/big');
    const hu = createHash('sha256');
    let upPeak = process.memoryUsage().rss;
    const upBase = upPeak;
    async function* source() {
      const piece = Buffer.alloc(MiB);
      for (let i = 0; i < SIZE / MiB; i++) {
        piece.fill(i & 0xff);
        piece.writeUInt32BE(i, 0);
        hu.update(piece);
        upPeak = Math.max(upPeak, process.memoryUsage().rss);
        yield piece;
      }
    }
    const t1 = performance.now();
    assert.equal(await sb.writeFileFrom('/tmp/up', source()), SIZE);
    const upSecs = (performance.now() - t1) / 1000;
    const r = await sb.exec('sha256sum /tmp/up');
    assert.equal(r.stdoutText.split(' ')[0], hu.digest('hex'));
    console.log(`upload: ${(SIZE / MiB / upSecs).toFixed(0)} MiB/s, rss grew ${((upPeak - upBase) / MiB).toFixed(0)} MiB`);
    assert.ok(upPeak - upBase < FLAT, `rss grew ${(upPeak - upBase) / MiB} MiB writing ${SIZE / MiB} MiB`);
  } finally {
    await sb.close();
  }
});
