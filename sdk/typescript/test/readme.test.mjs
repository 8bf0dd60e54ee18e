// The README's TypeScript quick-start, extracted, compiled with tsc
// against the package (by its own name) and run.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { noAirlock, repoRoot, sdkDir } from './helpers.mjs';

test("the README's TypeScript quick-start runs", { skip: noAirlock, timeout: 120000 }, () => {
  const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');
  const at = readme.indexOf('\n### TypeScript\n');
  assert.ok(at >= 0, 'README has no "### TypeScript" section');
  const m = /```ts\n([\s\S]*?)\n```/.exec(readme.slice(at));
  assert.ok(m, 'no ts code block in the TypeScript section');
  // Inside the package, so that '@airlock/sdk' resolves to it by name.
  const dir = join(sdkDir, 'build', 'readme');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'quickstart.ts'), `${m[1]}\n`);
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        lib: ['ES2022', 'ESNext.Disposable'],
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        skipLibCheck: true,
        types: ['node'],
        typeRoots: [join(sdkDir, 'node_modules', '@types')],
        rootDir: '.',
        outDir: 'out',
      },
      files: ['quickstart.ts'],
    }),
  );
  const tsc = spawnSync(process.execPath, [join(sdkDir, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir], { encoding: 'utf8' });
  assert.equal(tsc.status, 0, `tsc:\n${tsc.stdout}${tsc.stderr}`);
  const run = spawnSync(process.execPath, [join(dir, 'out', 'quickstart.js')], { encoding: 'utf8', timeout: 60000 });
  assert.equal(run.status, 0, `quick-start:\n${run.stdout}${run.stderr}`);
  assert.match(run.stdout, /^0 hello from sb-[0-9a-f]+$/m);
  assert.match(run.stdout, /^1\n2\n3\n/m);
  assert.match(run.stdout, /event: file write \/workspace\/hello\.sh/);
  assert.match(run.stdout, /\[ 'hello\.sh' \]/);
  assert.match(run.stdout, /^true$/m);
});
