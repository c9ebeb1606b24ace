/**
 * The docs and the code agree where they drifted before: the flag table of docs/configuration.md is the flags
 * plexusd takes (src/node/config.ts), and every list of native network types in the docs and the README is the
 * driver registry's (src/drivers/registry.ts). A flag or a driver added to one and not the other fails here.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { DriverRegistry } from '../../src/drivers/registry';
import { FLAGS } from '../../src/node/config';

const ROOT = join(__dirname, '..', '..', '..');
const read = (file: string): string => readFileSync(join(ROOT, file), 'utf8');

/** The rows of the markdown table whose header line is `header`, up to the first line that is not a table row. */
function tableRows(text: string, header: string): string[][] {
  const lines = text.split('\n');
  const start = lines.indexOf(header);
  assert.ok(start >= 0, `a table headed ${header}`);
  const rows: string[][] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(
      line
        .split('|')
        .slice(1, -1)
        .map((cell) => cell.trim()),
    );
  }
  return rows;
}

/** The text from `anchor` to the next `end` after it. */
function passage(text: string, anchor: string, end: string): string {
  const at = text.indexOf(anchor);
  assert.ok(at >= 0, `the passage starting "${anchor}"`);
  const stop = text.indexOf(end, at + anchor.length);
  assert.ok(stop >= 0, `the passage starting "${anchor}" ends with "${end}"`);
  return text.slice(at + anchor.length, stop);
}

const quoted = (text: string): string[] => [...text.matchAll(/`([a-z][a-z-]*)`/g)].map((m) => m[1]!);
const sorted = (names: Iterable<string>): string[] => [...new Set(names)].sort();

describe('docs/configuration.md flag table', () => {
  const rows = tableRows(read('docs/configuration.md'), '| Flag | Key | Default | Meaning |');
  const documented = new Map(
    rows.map(([flag, key]) => [/^`(--[a-z-]+)/.exec(flag ?? '')?.[1] ?? flag ?? '', key ?? '']),
  );

  it('lists every flag plexusd takes, and only those', () => {
    assert.deepEqual(sorted(documented.keys()), sorted([...Object.keys(FLAGS), '--config']));
  });

  it('names the config-file key each flag sets', () => {
    const wrong = Object.entries(FLAGS).filter(([flag, key]) => documented.get(flag) !== `\`${key}\``);
    assert.deepEqual(
      wrong.map(([flag, key]) => `${flag} sets ${key}, documented as ${documented.get(flag)}`),
      [],
    );
  });
});

describe('lists of native network types', () => {
  const registered = sorted(new DriverRegistry().types());

  it('the registry has the types the docs were written for (a guard on this test itself)', () => {
    assert.ok(
      registered.includes('bridge') && registered.includes('ptp') && registered.includes('memif'),
      registered.join(', '),
    );
  });

  it('docs/configuration.md: "How a network is run"', () => {
    const text = passage(read('docs/configuration.md'), 'its `type` is one of', '(`src/drivers/registry.ts`)');
    assert.deepEqual(sorted(quoted(text)), registered);
  });

  it('docs/networks.md: which driver runs a network', () => {
    const text = passage(read('docs/networks.md'), 'of a type Plexus runs\nnatively (', '; see [drivers.md]');
    assert.deepEqual(sorted(quoted(text)), registered);
  });

  it('docs/drivers.md: the opening list', () => {
    const text = passage(read('docs/drivers.md'), 'work unchanged:', '(`src/drivers/registry.ts`)');
    assert.deepEqual(sorted(quoted(text)), registered);
  });

  it('README.md: the native network types', () => {
    const text = passage(read('README.md'), 'Native network types:', 'runs through delegation');
    assert.deepEqual(sorted(quoted(text).filter((t) => t !== 'plexus.io')), registered);
  });

  it('README.md: the comparison with Multus', () => {
    const text = passage(read('README.md'), '| how a network is made |', 'made by the daemon itself');
    assert.deepEqual(sorted(quoted(text)), registered);
  });

  it('README.md: one folder per driver in the layout, the delegate driver besides', () => {
    const text = passage(read('README.md'), 'one folder per driver (', ')');
    assert.deepEqual(sorted(text.split(',').map((t) => t.trim())), sorted([...registered, 'delegate']));
  });
});
