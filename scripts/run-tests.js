#!/usr/bin/env node
// Runs every compiled test file (dist/test/**/*.test.js) with Node's test runner.
// Optional arguments narrow the run to paths containing any of them, e.g. `node scripts/run-tests.js ipam shim`.
// After Node's own summary, closing lines say how many suites and tests were skipped and why. A skip for a missing
// expected prerequisite (test/support/prerequisites.ts) fails the run when CI or PLEXUS_REQUIRE_ALL=1 is set.
'use strict';
const { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } = require('node:fs');
const { tmpdir } = require('node:os');
const { join, relative } = require('node:path');
const { spawnSync } = require('node:child_process');
const { compileStandaloneTests } = require('./standalone-tests');

const root = join(__dirname, '..', 'dist', 'test');
const filters = process.argv.slice(2);
// Test files that import nothing of the repository run without a build (scripts/standalone-tests.js).
for (const file of compileStandaloneTests(filters)) console.log(`# plexus: compiled ${file} alone (no build needed)`);
const files = [];
(function walk(dir) {
  if (!existsSync(dir)) return;
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) {
      walk(path);
      continue;
    }
    const wanted = name.endsWith('.test.js') && (filters.length === 0 || filters.some((f) => relative(root, path).includes(f)));
    // A compiled copy whose source was moved or deleted stays in dist/ until it is cleaned: never run it.
    const source = join(__dirname, '..', relative(join(__dirname, '..', 'dist'), path).replace(/\.js$/, '.ts'));
    if (wanted && existsSync(source)) files.push(path);
  }
})(root);
if (files.length === 0) {
  console.error('no test files found under', root);
  process.exit(1);
}

// The same rule as requireAll() in test/support/prerequisites.ts (this script runs without the build's modules).
const on = (v) => v !== undefined && !['', '0', 'false', 'no'].includes(v.trim().toLowerCase());
const requireAll = on(process.env.CI) || on(process.env.PLEXUS_REQUIRE_ALL);
const OPTIONAL = 'optional: ';

// Node's default reporter stays what it would be (spec on a terminal, TAP otherwise); a second one records skips.
const work = mkdtempSync(join(tmpdir(), 'plexus-run-tests-'));
const skipsFile = join(work, 'skips.jsonl');
const reporters = [
  `--test-reporter=${process.stdout.isTTY ? 'spec' : 'tap'}`, '--test-reporter-destination=stdout',
  `--test-reporter=${join(__dirname, 'test-skips-reporter.js')}`, `--test-reporter-destination=${skipsFile}`,
];
// Tests share one machine's kernel: run files one at a time so timing-sensitive ones are not starved on 2 cores.
const result = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...reporters, ...files], { stdio: 'inherit' });
let skips = [];
try {
  skips = readFileSync(skipsFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
} catch {
  /* no skip recorded */
}
rmSync(work, { recursive: true, force: true });

const source = (file) => relative(join(__dirname, '..'), file).replace(/^dist\//, '').replace(/\.js$/, '.ts');
const where = (s) => (s.file ? source(s.file) : '?');
const count = (list, kind) => `${list.length} ${kind}${list.length === 1 ? '' : 's'}`;
const unexpected = skips.filter((s) => !s.reason.startsWith(OPTIONAL));
const listed = (places) => (places.length > 3 ? `${places.slice(0, 3).join(', ')} and ${places.length - 3} more` : places.join(', '));
if (skips.length > 0) {
  const [suites, tests] = [skips.filter((s) => s.suite), skips.filter((s) => !s.suite)];
  const what = [
    ...(suites.length ? [`${count(suites, 'suite')} (none of ${suites.length === 1 ? 'its' : 'their'} tests ran)`] : []),
    ...(tests.length ? [count(tests, 'test')] : []),
  ];
  console.log(`# plexus: skipped ${what.join(' and ')}:`);
  const byReason = new Map();
  for (const s of skips) byReason.set(s.reason, [...(byReason.get(s.reason) ?? []), s]);
  for (const [reason, list] of byReason) console.log(`#   ${reason || '(no reason given)'}: ${listed([...new Set(list.map(where))])}`);
  if (unexpected.length > 0 && !requireAll) {
    console.log('# plexus: CI (or PLEXUS_REQUIRE_ALL=1) fails a run with these skips; ' +
      'bash scripts/setup.sh and ../shared provide what they lack');
  }
}
if (requireAll && unexpected.length > 0) {
  console.log(`# plexus: FAILED: ${count(unexpected, 'skip')} for a missing prerequisite ` +
    'in a run that requires everything (CI or PLEXUS_REQUIRE_ALL=1)');
  process.exit(1);
}
process.exit(result.status ?? 1);
