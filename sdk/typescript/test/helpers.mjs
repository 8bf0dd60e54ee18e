// Shared by the tests: where the repository, airlock and the test image
// are, and which processes a session still has.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const sdkDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const repoRoot = resolve(sdkDir, '..', '..');

/** The airlock binary the tests drive: $AIRLOCK_BIN, else the repository's bin/airlock (make build). */
export const airlockBin = process.env.AIRLOCK_BIN || join(repoRoot, 'bin', 'airlock');
process.env.AIRLOCK_BIN = airlockBin;

/** Why the tests cannot run here, or undefined. */
export const noAirlock = existsSync(airlockBin) ? undefined : `${airlockBin} is missing: run make build`;

/**
 * The image cache that holds name ($AIRLOCK_TEST_IMAGE_CACHE, filled by
 * make images), or a reason to skip.
 */
export function testImage(name) {
  const dir = process.env.AIRLOCK_TEST_IMAGE_CACHE;
  if (!dir) return { skip: `image ${name}: set AIRLOCK_TEST_IMAGE_CACHE to a cache that holds it (make images builds it, as root)` };
  try {
    for (const f of readdirSync(join(dir, 'names'))) {
      if (!f.endsWith('.json')) continue;
      const n = JSON.parse(readFileSync(join(dir, 'names', f), 'utf8'));
      if (n.name === name && existsSync(join(dir, 'images', String(n.key).replace(/^sha256:/, '')))) return { dir };
    }
  } catch (err) {
    return { skip: `image ${name}: cannot read the cache ${dir}: ${err.message}` };
  }
  return { skip: `image ${name} is not in ${dir} (make images builds it, as root)` };
}

/** The pids of the processes in session sid (a detached child's pid). */
export function sessionPids(sid) {
  const out = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${e}/stat`, 'utf8');
    } catch {
      continue;
    }
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // f[0] state, f[1] ppid, f[2] pgrp, f[3] session
    if (Number(f[3]) === sid && f[0] !== 'Z') out.push(Number(e));
  }
  return out;
}

/** Whether pid is alive (not a zombie). */
export function alive(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** Waits until cond() holds, at most ms; returns whether it did. */
export async function waitFor(cond, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await cond()) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
}
