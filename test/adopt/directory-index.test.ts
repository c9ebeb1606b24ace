import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, unlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { DirectoryIndex } from '../../src/adopt/directory-index';

const root = mkdtempSync(join(tmpdir(), 'plexus-dir-index-'));
after(() => rmSync(root, { recursive: true, force: true }));

let dirs = 0;
/** A directory of `count` files, and an index of it that counts its reads; `now` as the index's clock. */
function indexed(count: number, now?: () => number): { dir: string; index: DirectoryIndex<string>; reads: string[] } {
  const dir = join(root, `d${++dirs}`);
  mkdirSync(dir);
  for (let i = 0; i < count; i++) writeFileSync(join(dir, `f${i}`), `content ${i}`);
  const reads: string[] = [];
  const index = new DirectoryIndex<string>({
    dir,
    accepts: (e) => e.isFile(),
    read: (name) => {
      reads.push(name);
      return name.startsWith('f') ? name.toUpperCase() : undefined;
    },
    ...(now ? { now } : {}),
  });
  return { dir, index, reads };
}

/** A clock far enough ahead that every mtime here has settled. */
const later = (): number => Date.now() + 60_000;

describe('DirectoryIndex', () => {
  it('reads each file once however many times it is listed', () => {
    const { index, reads } = indexed(50, later);
    assert.equal(index.current().size, 50);
    assert.equal(index.current().get('f7'), 'F7');
    assert.equal(reads.length, 50);
  });

  it('lists a file added and forgets a file removed since the last look, reading only the new one', () => {
    const { dir, index, reads } = indexed(5, later);
    index.current();
    writeFileSync(join(dir, 'f5'), 'new');
    unlinkSync(join(dir, 'f0'));
    const now = index.current();
    assert.deepEqual([...now.keys()].sort(), ['f1', 'f2', 'f3', 'f4', 'f5']);
    assert.deepEqual(reads.slice(5), ['f5']);
  });

  it('still finds a file added within the same mtime tick as a listing made while that mtime was recent', () => {
    // The kernel's coarse clock gives the directory the same mtime for both changes: set here to one value in ms.
    const tick = new Date(Math.floor(Date.now()) - 10);
    const sameTick = (dir: string): void => utimesSync(dir, tick, tick);
    const recent = indexed(2);
    sameTick(recent.dir);
    recent.index.current();
    writeFileSync(join(recent.dir, 'late'), 'x');
    sameTick(recent.dir);
    assert.ok(recent.index.current().has('late'));
    // The same with a clock that takes the mtime as settled: the file is not seen, which is why a recent one is not.
    const settled = indexed(2, later);
    sameTick(settled.dir);
    settled.index.current();
    writeFileSync(join(settled.dir, 'late'), 'x');
    sameTick(settled.dir);
    assert.ok(!settled.index.current().has('late'));
  });

  it('reads a large directory ahead in batches, leaving the event loop turns between them', async () => {
    const { index, reads } = indexed(200, later);
    let turns = 0;
    const tick = (): void => {
      turns++;
      if (reads.length < 200) setImmediate(tick);
    };
    setImmediate(tick);
    await index.refresh();
    assert.equal(reads.length, 200);
    assert.ok(turns >= 4, `the event loop turned ${turns} times while 200 files were read`);
    assert.equal(index.current().size, 200);
    assert.equal(reads.length, 200, 'nothing is read twice');
  });

  it('is empty when the directory is gone, and lists it again when it comes back', () => {
    const { dir, index } = indexed(3, later);
    assert.equal(index.current().size, 3);
    rmSync(dir, { recursive: true });
    assert.equal(index.current().size, 0);
    mkdirSync(dir);
    writeFileSync(join(dir, 'f9'), 'x');
    assert.deepEqual([...index.current().keys()], ['f9']);
  });
});
