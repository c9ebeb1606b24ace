// Compiles the test files that need no build: a test/**/*.test.ts that imports nothing of the repository (only Node's
// modules and packages) is compiled here, alone, when its copy under dist/ is missing or older than it. The layers
// check (test/docs/layers.test.ts) is one: it reads src/ as .ts text, so `node scripts/run-tests.js docs/layers`
// fails on a wrong import in seconds, with no `npm run build` first. Type errors in such a file are still the build's
// and the lint's to find; this only transpiles, with the options of tsconfig.json.
'use strict';
const { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } = require('node:fs');
const { dirname, join, relative } = require('node:path');

const ROOT = join(__dirname, '..');

function testSources(dir) {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return testSources(path);
      return name.endsWith('.test.ts') ? [path] : [];
    });
}

const compiledPath = (source) => join(ROOT, 'dist', relative(ROOT, source)).replace(/\.ts$/, '.js');
const stale = (source) => {
  const compiled = compiledPath(source);
  return !existsSync(compiled) || statSync(compiled).mtimeMs < statSync(source).mtimeMs;
};

/** Compiles the stale standalone test files whose path (relative to test/) contains one of `filters` (all if none). */
function compileStandaloneTests(filters) {
  const testDir = join(ROOT, 'test');
  const wanted = testSources(testDir).filter(
    (path) => filters.length === 0 || filters.some((f) => relative(testDir, path).replace(/\.ts$/, '.js').includes(f)),
  );
  const candidates = wanted.filter(stale);
  if (candidates.length === 0) return [];
  const ts = require('typescript');
  const config = ts.readConfigFile(join(ROOT, 'tsconfig.json'), ts.sys.readFile);
  const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, ROOT);
  const compiled = [];
  for (const source of candidates) {
    const text = readFileSync(source, 'utf8');
    const ofRepository = ts.preProcessFile(text, true, true).importedFiles.some((i) => i.fileName.startsWith('.'));
    if (ofRepository) continue;
    const { outputText } = ts.transpileModule(text, {
      compilerOptions: { ...options, sourceMap: false },
      fileName: source,
    });
    mkdirSync(dirname(compiledPath(source)), { recursive: true });
    writeFileSync(compiledPath(source), outputText);
    compiled.push(relative(ROOT, source));
  }
  return compiled;
}

module.exports = { compileStandaloneTests };
