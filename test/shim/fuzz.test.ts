// The shim's hand-written parsers under libFuzzer (shim/fuzz/parsers.c), with ASan and UBSan, for a short run from a
// fixed seed: a crash, a sanitizer report or a broken invariant fails the test with the fuzzer's own report.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { expectedPrerequisites } from '../support/prerequisites';

const shimDir = path.resolve(__dirname, '../../../shim');
const SECONDS = 10;
const clangMissing =
  spawnSync('clang', ['--version']).status !== 0
    ? 'clang is not installed (bash scripts/setup.sh installs clang and libclang-rt-14-dev)'
    : undefined;

// With clang present, a fuzz target that does not build is a failure (a broken target or missing libFuzzer runtime).
test(
  `the shim's config and reply parsers survive ${SECONDS} s of libFuzzer from a fixed seed`,
  { skip: expectedPrerequisites(clangMissing), timeout: (SECONDS + 60) * 1000 },
  () => {
    const built = spawnSync('make', ['-s', '-C', shimDir, 'fuzz'], { encoding: 'utf8' });
    assert.equal(
      built.status,
      0,
      `the fuzz target does not build (make -C shim fuzz): ${built.stderr.trim().split('\n').slice(-5).join('\n')}`,
    );
    const corpus = mkdtempSync(path.join(tmpdir(), 'plexus-fuzz-'));
    try {
      cpSync(path.join(shimDir, 'fuzz', 'corpus'), corpus, { recursive: true });
      const r = spawnSync(
        path.join(shimDir, 'build', 'fuzz-parsers'),
        [`-max_total_time=${SECONDS}`, '-seed=20261123', '-max_len=4096', `-artifact_prefix=${corpus}/`, corpus],
        { encoding: 'utf8', maxBuffer: 64 << 20 },
      );
      const report = r.stderr
        .split('\n')
        .filter((l) => /ERROR|SUMMARY|crash|Done \d+ runs/.test(l))
        .slice(0, 20)
        .join('\n');
      assert.equal(r.status, 0, `the fuzzer found a problem (crash input kept under ${corpus}):\n${report}`);
      const runs = Number(/Done (\d+) runs/.exec(r.stderr)?.[1] ?? 0);
      assert.ok(runs > 10_000, `it really ran: ${runs} inputs`);
      console.log(`# fuzz: ${runs} inputs in ${SECONDS} s, no finding`);
    } finally {
      if (existsSync(corpus)) rmSync(corpus, { recursive: true, force: true });
    }
  },
);
