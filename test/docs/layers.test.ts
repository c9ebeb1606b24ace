/**
 * The layers of docs/architecture.md are the code's: every import of src/ (import, export ... from, import(), type-only
 * ones too) is read from the sources, and checked against the doc's layer table. A folder of src/ is one layer (its
 * subfolders belong to it), so new files in a folder need no change here. Fails naming each import that runs up a
 * floor or is not in its folder's "may import" list, each circle between folders, and each circle between files.
 * It reads the .ts files under src/ in the repository, never dist/, and imports nothing of the repository itself, so
 * scripts/run-tests.js compiles it alone when dist/ lacks it (scripts/standalone-tests.js): a wrong import fails
 * `node scripts/run-tests.js docs/layers` in about two seconds, with no `npm run build` first.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';

const ROOT = join(__dirname, '..', '..', '..');
const SRC = join(ROOT, 'src');
const TABLE_HEADER = '| floor | folder | may import | holds |';

/** One import of one source file: `from` and `to` are paths relative to the repository, `line` 1-based. */
interface Import {
  readonly from: string;
  readonly to: string;
  readonly line: number;
  readonly specifier: string;
}

interface Layer {
  readonly floor: number;
  readonly mayImport: ReadonlySet<string>;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return sourceFiles(path);
      return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [path] : [];
    });
}

/** The source file a relative specifier names (`x.ts`, or `x/index.ts`); undefined for packages and other files. */
function resolve(fromFile: string, specifier: string): string | undefined {
  if (!specifier.startsWith('.')) return undefined;
  const base = join(dirname(fromFile), specifier);
  return [`${base}.ts`, join(base, 'index.ts')].find((candidate) => existsSync(candidate));
}

/** The imports of `file`, whose text is `text`, that name a source file of the repository. */
function importsIn(file: string, text: string): Import[] {
  const { importedFiles } = ts.preProcessFile(text, true, true);
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest);
  return importedFiles.flatMap(({ fileName, pos }) => {
    const target = resolve(file, fileName);
    if (target === undefined) return [];
    const line = source.getLineAndCharacterOfPosition(pos).line + 1;
    return [{ from: relative(ROOT, file), to: relative(ROOT, target), line, specifier: fileName }];
  });
}

const importsOf = (file: string): Import[] => importsIn(file, readFileSync(file, 'utf8'));

/** `src/ipam/cluster/claims.ts` -> `ipam`: the layer is the folder right under src/. */
const folderOf = (path: string): string => {
  const parts = path.split('/');
  return parts.length > 2 ? (parts[1] ?? '') : '(src itself)';
};

/** The doc's layer table: folder -> its floor and the folders it may import. */
function layerTable(): Map<string, Layer> {
  const lines = readFileSync(join(ROOT, 'docs', 'architecture.md'), 'utf8').split('\n');
  const start = lines.indexOf(TABLE_HEADER);
  assert.ok(start >= 0, `docs/architecture.md has a table headed ${TABLE_HEADER}`);
  const table = new Map<string, Layer>();
  for (const row of lines.slice(start + 2)) {
    if (!row.startsWith('|')) break;
    const [floor = '', folder = '', may = ''] = row
      .split('|')
      .slice(1)
      .map((cell) => cell.trim());
    const name = folder.replace(/`/g, '').replace(/^src\//, '');
    const mayImport = new Set(may === '—' ? [] : may.split(',').map((m) => m.trim()));
    assert.ok(!table.has(name), `the layer table names src/${name} once`);
    table.set(name, { floor: Number(floor), mayImport });
  }
  return table;
}

/** Circles of a directed graph (its strongly connected components of more than one node), each sorted. */
function circles(edges: ReadonlyMap<string, ReadonlySet<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, index.size);
    low.set(node, index.get(node)!);
    stack.push(node);
    for (const next of edges.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (stack.includes(next)) low.set(node, Math.min(low.get(node)!, index.get(next)!));
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    for (let top = stack.pop(); top !== undefined; top = top === node ? undefined : stack.pop()) component.push(top);
    if (component.length > 1) found.push(component.sort());
  };
  for (const node of [...edges.keys()].sort()) if (!index.has(node)) visit(node);
  return found;
}

function graph(imports: readonly Import[], key: (path: string) => string): Map<string, Set<string>> {
  const edges = new Map<string, Set<string>>();
  for (const { from, to } of imports) {
    const [a, b] = [key(from), key(to)];
    if (a === b) continue;
    if (!edges.has(a)) edges.set(a, new Set());
    edges.get(a)!.add(b);
  }
  return edges;
}

const describeImport = (i: Import): string => `${i.from}:${i.line} imports '${i.specifier}'`;

/**
 * Each circle with the imports that tie it, one line each; `closes` picks those that close it (the others are the
 * imports a layering allows), when it picks any.
 */
function describeCircles(
  imports: readonly Import[],
  key: (path: string) => string,
  closes: (i: Import) => boolean = () => true,
): string[] {
  return circles(graph(imports, key)).map((members) => {
    const inside = (path: string): boolean => members.includes(key(path));
    const ties = imports.filter((i) => key(i.from) !== key(i.to) && inside(i.from) && inside(i.to));
    const named = ties.some(closes) ? ties.filter(closes) : ties;
    return `${members.join(' <-> ')}, closed by ${named.map(describeImport).join('; ')}`;
  });
}

describe('the layers of docs/architecture.md', () => {
  const table = layerTable();
  const imports = sourceFiles(SRC).flatMap(importsOf);

  it('reads the imports it checks (a guard on this test itself)', () => {
    const ofServe = imports.filter((i) => i.from === 'src/node/serve.ts');
    assert.ok(
      ofServe.some((i) => folderOf(i.to) === 'engine'),
      'node/serve.ts imports engine',
    );
    const ofCluster = imports.filter((i) => i.from === 'src/node/cluster.ts');
    assert.ok(
      ofCluster.some((i) => i.to === 'src/node/node-lease.ts'),
      'dynamic imports are read (only one names node-lease)',
    );
  });

  it('reads every form of import: static, type-only, export ... from, import() and require()', () => {
    const file = join(SRC, 'node', 'guard-of-the-layers-test.ts');
    const text = [
      "import { a } from '../common/result';",
      "import type { B } from '../cni/errors';",
      "export { c } from '../cni/version';",
      "const later = import('../common/ip');",
      "const required = require('../common/bounded-file');",
      "import data from 'a-package';",
    ].join('\n');
    assert.deepEqual(
      importsIn(file, text).map((i) => `${i.line} ${i.to}`),
      [
        '1 src/common/result.ts',
        '2 src/cni/errors.ts',
        '3 src/cni/version.ts',
        '4 src/common/ip.ts',
        '5 src/common/bounded-file.ts',
      ],
    );
  });

  it('names every folder of src/, and only those', () => {
    const folders = readdirSync(SRC).filter((name) => statSync(join(SRC, name)).isDirectory());
    assert.deepEqual([...table.keys()].sort(), folders.sort());
    assert.deepEqual(
      sourceFiles(SRC)
        .map((f) => relative(ROOT, f))
        .filter((f) => folderOf(f) === '(src itself)'),
      [],
    );
  });

  it('lets each folder import only folders on lower floors', () => {
    const wrong = [...table].flatMap(([folder, { floor, mayImport }]) =>
      [...mayImport]
        .filter((other) => !((table.get(other)?.floor ?? Infinity) < floor))
        .map((other) => `${folder} (floor ${floor}) may import ${other}`),
    );
    assert.deepEqual(wrong, []);
  });

  it('has no import that runs up a floor or outside its folder\'s "may import"', () => {
    const wrong = imports.flatMap((i) => {
      const [from, to] = [folderOf(i.from), folderOf(i.to)];
      const layer = table.get(from);
      if (from === to || layer?.mayImport.has(to)) return [];
      const floors = `${from} is on floor ${layer?.floor ?? '?'}, ${to} on floor ${table.get(to)?.floor ?? '?'}`;
      const up = (table.get(to)?.floor ?? Infinity) >= (layer?.floor ?? -Infinity);
      const why = up ? 'runs up a floor' : `is not in the "may import" of src/${from}`;
      return [`${describeImport(i)}: ${why} (${floors})`];
    });
    assert.deepEqual(wrong, []);
  });

  it('has no circle between folders', () => {
    const floor = (path: string): number => table.get(folderOf(path))?.floor ?? Infinity;
    assert.deepEqual(
      describeCircles(imports, folderOf, (i) => floor(i.to) >= floor(i.from)),
      [],
    );
  });

  it('has no circle between files', () => {
    assert.deepEqual(
      describeCircles(imports, (path) => path),
      [],
    );
  });
});
