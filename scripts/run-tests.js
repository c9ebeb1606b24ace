#!/usr/bin/env node
// Runs every compiled test file (dist/test/**/*.test.js) with Node's test runner.
// Optional arguments narrow the run to paths containing any of them, e.g. `node scripts/run-tests.js ipam shim`.
'use strict';
const { readdirSync, statSync } = require('node:fs');
const { join, relative } = require('node:path');
const { spawnSync } = require('node:child_process');

const root = join(__dirname, '..', 'dist', 'test');
const filters = process.argv.slice(2);
const files = [];
(function walk(dir) {
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (name.endsWith('.test.js') && (filters.length === 0 || filters.some((f) => relative(root, path).includes(f)))) files.push(path);
  }
})(root);
if (files.length === 0) {
  console.error('no test files found under', root);
  process.exit(1);
}
// Tests share one machine's kernel: run files one at a time so timing-sensitive ones are not starved on 2 cores.
const result = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...files], { stdio: 'inherit' });
process.exit(result.status ?? 1);
