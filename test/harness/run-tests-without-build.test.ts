/**
 * scripts/run-tests.js without a build: a test file that imports only packages is compiled alone when dist/ lacks it
 * or holds an older copy (scripts/standalone-tests.js); one that imports the repository is left to the build, and a
 * compiled copy whose source is gone is not run. Each check runs the real scripts in a copy of the repository's
 * layout under a temporary directory, so this repository's dist/ is never touched.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { ROOT } from '../support/daemon';

const PASSING =
  "import { it } from 'node:test';\nimport assert from 'node:assert/strict';\nit('adds', () => assert.equal(1 + 1, 2));\n";

describe('run-tests.js on a tree without a build', () => {
  let tree = '';
  beforeEach(() => {
    tree = mkdtempSync(join(tmpdir(), 'plexus-standalone-'));
    mkdirSync(join(tree, 'scripts'));
    for (const f of ['run-tests.js', 'standalone-tests.js', 'test-skips-reporter.js'])
      copyFileSync(join(ROOT, 'scripts', f), join(tree, 'scripts', f));
    copyFileSync(join(ROOT, 'tsconfig.json'), join(tree, 'tsconfig.json'));
    symlinkSync(join(ROOT, 'node_modules'), join(tree, 'node_modules'));
    mkdirSync(join(tree, 'test', 'docs'), { recursive: true });
  });
  afterEach(() => rmSync(tree, { recursive: true, force: true }));

  const runTests = (...filters: string[]): { status: number | null; out: string } => {
    const r = spawnSync(process.execPath, [join(tree, 'scripts', 'run-tests.js'), ...filters], {
      encoding: 'utf8',
      // Not NODE_TEST_CONTEXT: with it, the inner node --test would take itself for a child of this one and run nothing.
      env: { ...process.env, NODE_TEST_CONTEXT: undefined, CI: '', PLEXUS_REQUIRE_ALL: '' },
    });
    return { status: r.status, out: r.stdout + r.stderr };
  };
  const compiled = (name: string): string => join(tree, 'dist', 'test', 'docs', `${name}.test.js`);

  it('compiles a test file that imports only packages, runs it, and fails the run when it fails', () => {
    writeFileSync(join(tree, 'test', 'docs', 'alone.test.ts'), PASSING);
    const passed = runTests('docs/alone');
    assert.equal(passed.status, 0, passed.out);
    assert.match(passed.out, /compiled test\/docs\/alone\.test\.ts alone/);
    assert.match(passed.out, /# pass 1/);
    writeFileSync(join(tree, 'test', 'docs', 'alone.test.ts'), PASSING.replace('1 + 1, 2', '1 + 1, 3'));
    const failed = runTests('docs/alone');
    assert.equal(failed.status, 1, 'a source newer than its compiled copy is compiled again');
    assert.match(failed.out, /# fail 1/);
  });

  it('leaves a test file that imports the repository to the build, and a compiled copy up to date as it is', () => {
    writeFileSync(join(tree, 'test', 'docs', 'of-repo.test.ts'), `import '../../src/x';\n${PASSING}`);
    assert.match(runTests('docs/of-repo').out, /no test files found/);
    assert.equal(existsSync(compiled('of-repo')), false);
    writeFileSync(join(tree, 'test', 'docs', 'built.test.ts'), PASSING);
    mkdirSync(join(tree, 'dist', 'test', 'docs'), { recursive: true });
    writeFileSync(compiled('built'), "require('node:test').it('the build made this copy', () => {});\n");
    const later = new Date(Date.now() + 60_000);
    utimesSync(compiled('built'), later, later);
    const r = runTests('docs/built');
    assert.equal(r.status, 0, r.out);
    assert.doesNotMatch(r.out, /compiled test\/docs\/built/);
  });

  it('never runs a compiled copy whose source was moved or deleted', () => {
    mkdirSync(join(tree, 'dist', 'test', 'docs'), { recursive: true });
    writeFileSync(compiled('moved'), "require('node:test').it('a stale copy', () => { throw new Error('ran'); });\n");
    writeFileSync(join(tree, 'test', 'docs', 'kept.test.ts'), PASSING);
    const r = runTests('docs/');
    assert.equal(r.status, 0, r.out);
    assert.match(r.out, /# pass 1/);
    assert.doesNotMatch(r.out, /a stale copy/);
  });
});
