#!/usr/bin/env node
// Codemod: conditional spreads of one optional field -> definedFields (src/common/defined-fields.ts).
//   { a, ...(x ? { x } : {}), ...(y !== undefined ? { why: y } : {}) }  ->  { a, ...definedFields({ x, why: y }) }
//   { ...(x ? { x } : {}) }                                               ->  definedFields({ x })
// definedFields leaves out exactly the undefined fields, so each field keeps what the spread did: its condition is
// `v !== undefined`, or `v` itself; then where v's type (read with the type checker) may be falsy other than undefined
// (a string, a number, a boolean: '', 0, false), the field is `key: v || undefined`, so those are still left out.
// v is a name or a chain of property reads (no call is moved). Adjacent rewritten spreads share one call. The helper
// is imported where it is used. Re-runnable and idempotent: a second run changes nothing. From the repository's root:
//   node scripts/codemods/spread-to-defined-fields.js [DIR...]     (default: src)
// then `npx prettier --config .prettierrc.json --write` on the files it names, and build.
'use strict';
const { writeFileSync } = require('node:fs');
const { dirname, join, relative, sep } = require('node:path');
const ts = require('typescript');

const ROOT = join(__dirname, '..', '..');
const HELPER = join(ROOT, 'src', 'common', 'defined-fields.ts');
const dirs = (process.argv.slice(2).length ? process.argv.slice(2) : ['src']).map((d) => join(ROOT, d) + sep);

const config = ts.readConfigFile(join(ROOT, 'tsconfig.json'), ts.sys.readFile);
const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, ROOT);
const program = ts.createProgram(parsed.fileNames, parsed.options);
const checker = program.getTypeChecker();

const unwrap = (node) => (ts.isParenthesizedExpression(node) ? unwrap(node.expression) : node);

/** A name or a chain of property reads (a.b.c, a?.b): evaluating it once or twice is the same. */
const isPlainRead = (node) =>
  ts.isIdentifier(node) ||
  (ts.isPropertyAccessExpression(node) && ts.isIdentifier(node.name) && isPlainRead(node.expression));

/** Whether a value of `type` is falsy only when it is undefined. */
function falsyOnlyWhenUndefined(type) {
  if (type.isUnion()) return type.types.every(falsyOnlyWhenUndefined);
  if (type.isIntersection()) return type.types.some((t) => t.flags & (ts.TypeFlags.Object | ts.TypeFlags.NonPrimitive));
  const f = type.flags;
  if (f & ts.TypeFlags.Undefined) return true;
  if (f & (ts.TypeFlags.Object | ts.TypeFlags.NonPrimitive)) return true;
  if (f & ts.TypeFlags.StringLiteral) return type.value !== '';
  if (f & ts.TypeFlags.NumberLiteral) return type.value !== 0;
  if (f & ts.TypeFlags.BooleanLiteral) return checker.typeToString(type) === 'true';
  return false;
}

const isUndefined = (node) => ts.isIdentifier(node) && node.text === 'undefined';

/** The field `prop` adds when it is `...(cond ? { key: v } : {})` and definedFields does the same; else undefined. */
function fieldOf(prop, source) {
  if (!ts.isSpreadAssignment(prop)) return undefined;
  const cond = unwrap(prop.expression);
  if (!ts.isConditionalExpression(cond)) return undefined;
  const [whenTrue, whenFalse] = [unwrap(cond.whenTrue), unwrap(cond.whenFalse)];
  if (!ts.isObjectLiteralExpression(whenFalse) || whenFalse.properties.length !== 0) return undefined;
  if (!ts.isObjectLiteralExpression(whenTrue) || whenTrue.properties.length !== 1) return undefined;
  const field = whenTrue.properties[0];
  let key;
  let value;
  if (ts.isShorthandPropertyAssignment(field) && !field.objectAssignmentInitializer) {
    key = field.name.text;
    value = field.name;
  } else if (ts.isPropertyAssignment(field) && (ts.isIdentifier(field.name) || ts.isStringLiteral(field.name))) {
    key = field.name.getText(source);
    value = unwrap(field.initializer);
  } else return undefined;
  if (!isPlainRead(value)) return undefined;
  const v = value.getText(source);
  const test = unwrap(cond.condition);
  const definedTest =
    ts.isBinaryExpression(test) &&
    test.operatorToken.kind === ts.SyntaxKind.ExclamationEqualsEqualsToken &&
    ((test.left.getText(source) === v && isUndefined(test.right)) ||
      (test.right.getText(source) === v && isUndefined(test.left)));
  const truthyTest = test.getText(source) === v;
  if (!definedTest && !truthyTest) return undefined;
  // A value that may be falsy ('' or 0 or false) was left out by the spread: `|| undefined` leaves it out still.
  if (!definedTest && !falsyOnlyWhenUndefined(checker.getTypeAtLocation(test))) return `${key}: ${v} || undefined`;
  return key === v ? v : `${key}: ${v}`;
}

/** Edits of one object literal: each run of adjacent rewritable spreads becomes one definedFields spread. */
function editsOf(literal, source) {
  const edits = [];
  const props = literal.properties;
  let run = [];
  const flush = () => {
    if (run.length === 0) return;
    const fields = run.map((r) => r.field).join(', ');
    const whole = run.length === props.length;
    const [start, end] = whole
      ? [literal.getStart(source), literal.getEnd()]
      : [run[0].prop.getStart(source), run[run.length - 1].prop.getEnd()];
    edits.push({ start, end, text: whole ? `definedFields({ ${fields} })` : `...definedFields({ ${fields} })` });
    run = [];
  };
  props.forEach((prop, i) => {
    const field = fieldOf(prop, source);
    const between = i > 0 ? source.text.slice(props[i - 1].getEnd(), prop.getStart(source)) : ',';
    if (field === undefined || !/^[\s,]*$/.test(between)) flush();
    if (field !== undefined) run.push({ prop, field });
  });
  flush();
  return edits;
}

function helperImport(file) {
  const rel = relative(dirname(file), HELPER).replace(/\.ts$/, '');
  return `import { definedFields } from '${rel.startsWith('.') ? rel : `./${rel}`}';\n`;
}

function withImport(file, text) {
  if (/import \{[^}]*\bdefinedFields\b[^}]*\} from '[^']*common\/defined-fields';/.test(text)) return text;
  const imports = [...text.matchAll(/^import [^;]*;\n/gm)];
  const at = imports.length ? imports[imports.length - 1].index + imports[imports.length - 1][0].length : 0;
  return text.slice(0, at) + helperImport(file) + text.slice(at);
}

/** The new text of each file with edits: file -> text. */
const rewritten = new Map();
for (const source of program.getSourceFiles()) {
  const file = source.fileName;
  if (!dirs.some((d) => file.startsWith(d)) || file === HELPER || file.endsWith('.d.ts')) continue;
  const edits = [];
  const visit = (node) => {
    if (ts.isObjectLiteralExpression(node)) edits.push(...editsOf(node, source));
    ts.forEachChild(node, visit);
  };
  visit(source);
  if (edits.length === 0) continue;
  // Runs of plain reads never hold another literal's edit, but a whole literal replaced may: keep the outermost.
  edits.sort((a, b) => a.start - b.start || b.end - a.end);
  const kept = edits.filter((e, i) => !edits.slice(0, i).some((o) => o.start <= e.start && e.end <= o.end));
  let text = source.text;
  for (const e of kept.reverse()) text = text.slice(0, e.start) + e.text + text.slice(e.end);
  rewritten.set(file, withImport(file, text));
}

// A literal whose type mattered (a field now `T | undefined` where only T fits) would not compile: such a file is
// left as it was, named, for a hand to look at.
const host = ts.createCompilerHost(parsed.options);
const readFile = host.readFile.bind(host);
host.readFile = (file) => rewritten.get(file) ?? readFile(file);
const getSourceFile = host.getSourceFile.bind(host);
host.getSourceFile = (file, language, onError) =>
  rewritten.has(file)
    ? ts.createSourceFile(file, rewritten.get(file), language, true)
    : getSourceFile(file, language, onError);
const after = ts.createProgram(parsed.fileNames, parsed.options, host, program);
let changed = 0;
for (const [file, text] of rewritten) {
  const broken = after.getSemanticDiagnostics(after.getSourceFile(file)).length > 0;
  if (broken) {
    console.error(`left as it was (it would not type-check): ${relative(ROOT, file)}`);
    continue;
  }
  writeFileSync(file, text);
  changed += 1;
  console.log(relative(ROOT, file));
}
console.error(`defined-fields codemod: ${changed} file(s) changed`);
