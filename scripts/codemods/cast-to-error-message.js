#!/usr/bin/env node
// Codemod: `(e as Error).message` -> `errorMessage(e)` (src/common/error-message.ts), importing the helper where it
// is used. Re-runnable and idempotent: a second run finds nothing to change. Run from the repository's root:
//   node scripts/codemods/cast-to-error-message.js [DIR...]      (default: src)
// then `npx prettier --config .prettierrc.json --write` on the files it names, and build.
'use strict';
const { readdirSync, readFileSync, statSync, writeFileSync } = require('node:fs');
const { dirname, join, relative } = require('node:path');

const ROOT = join(__dirname, '..', '..');
const HELPER = join(ROOT, 'src', 'common', 'error-message.ts');
const CAST = /\((\w+) as Error\)\.message\b/g;

function sourceFiles(dir) {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return sourceFiles(path);
      return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [path] : [];
    });
}

/** The specifier that imports the helper from `file`. */
function helperSpecifier(file) {
  const rel = relative(dirname(file), HELPER).replace(/\.ts$/, '');
  return rel.startsWith('.') ? rel : `./${rel}`;
}

/** `text` with an import of errorMessage after its last top-level import, unless it has one already. */
function withImport(file, text) {
  if (/import \{[^}]*\berrorMessage\b[^}]*\} from '[^']*common\/error-message';/.test(text)) return text;
  const line = `import { errorMessage } from '${helperSpecifier(file)}';\n`;
  const imports = [...text.matchAll(/^import [^;]*;\n/gm)];
  if (imports.length === 0) return line + text;
  const last = imports[imports.length - 1];
  const at = last.index + last[0].length;
  return text.slice(0, at) + line + text.slice(at);
}

const dirs = process.argv.slice(2);
let changed = 0;
for (const dir of dirs.length ? dirs : ['src']) {
  for (const file of sourceFiles(join(ROOT, dir))) {
    if (file === HELPER) continue;
    const text = readFileSync(file, 'utf8');
    if (text.search(CAST) < 0) continue;
    const rewritten = withImport(
      file,
      text.replace(CAST, (_, name) => `errorMessage(${name})`),
    );
    writeFileSync(file, rewritten);
    changed += 1;
    console.log(relative(ROOT, file));
  }
}
console.error(`error-message codemod: ${changed} file(s) changed`);
