/**
 * One meaning per name: an exported name of src/ is defined in one file only. Two `AttachRequest`s (a CNI request
 * variant and what a driver gets) make a reader guess which one a file means; the second gets a name of its own
 * instead (never an alias). Re-exports (`export { x } from`) are not definitions. Reads src/ as .ts text and imports
 * nothing of the repository, so it runs without a build (scripts/standalone-tests.js).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';

const ROOT = join(__dirname, '..', '..', '..');
const SRC = join(ROOT, 'src');

/**
 * The one name allowed two definitions, because the second is the first itself, specialized: cni/errors.ts's
 * `Result<T, E = CniError>` is common/result.ts's `Result<T, E>` with the error most of src/ returns filled in.
 */
const SPECIALIZED = new Map([['Result', ['src/cni/errors.ts', 'src/common/result.ts']]]);

function sourceFiles(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return sourceFiles(path);
      return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [path] : [];
    });
}

const exported = (node: ts.Node): boolean =>
  ts.canHaveModifiers(node) && (ts.getModifiers(node) ?? []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword);

/** The names `text` defines and exports itself (declarations with `export`, not `export { x } from`). */
function exportedNames(file: string, text: string): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest);
  return source.statements.flatMap((statement): string[] => {
    if (!exported(statement)) return [];
    if (ts.isVariableStatement(statement)) {
      return statement.declarationList.declarations.flatMap((d) => (ts.isIdentifier(d.name) ? [d.name.text] : []));
    }
    if (
      ts.isFunctionDeclaration(statement) ||
      ts.isClassDeclaration(statement) ||
      ts.isInterfaceDeclaration(statement) ||
      ts.isTypeAliasDeclaration(statement) ||
      ts.isEnumDeclaration(statement)
    ) {
      return statement.name ? [statement.name.text] : [];
    }
    return [];
  });
}

/** name -> the files (relative to the repository) that define and export it, for names defined in more than one. */
function namesDefinedTwice(files: readonly { path: string; text: string }[]): Map<string, string[]> {
  const where = new Map<string, string[]>();
  for (const { path, text } of files) {
    for (const name of new Set(exportedNames(path, text))) where.set(name, [...(where.get(name) ?? []), path]);
  }
  return new Map([...where].filter(([, paths]) => paths.length > 1).sort(([a], [b]) => a.localeCompare(b)));
}

describe('one meaning per name across src/', () => {
  it('reads exported definitions, and not re-exports (a guard on this test itself)', () => {
    const text = [
      'export interface A {}',
      'export type B = string;',
      'export const c = 1, d = 2;',
      'export function e() {}',
      'export class F {}',
      'export enum G {}',
      "export { h } from './h';",
      'const i = 1;',
      'export { i };',
    ].join('\n');
    assert.deepEqual(exportedNames('guard.ts', text), ['A', 'B', 'c', 'd', 'e', 'F', 'G']);
    const twice = namesDefinedTwice([
      { path: 'a.ts', text: 'export type Key = string;' },
      { path: 'b.ts', text: "export interface Key { id: string }\nexport { Key as Other } from './a';" },
    ]);
    assert.deepEqual([...twice], [['Key', ['a.ts', 'b.ts']]]);
  });

  it('has no exported name defined in two files of src/', () => {
    const files = sourceFiles(SRC).map((path) => ({ path: relative(ROOT, path), text: readFileSync(path, 'utf8') }));
    const twice = [...namesDefinedTwice(files)]
      .filter(([name, paths]) => SPECIALIZED.get(name)?.join() !== paths.join())
      .map(([name, paths]) => `${name}: ${paths.join(', ')}`);
    assert.deepEqual(twice, []);
  });
});
