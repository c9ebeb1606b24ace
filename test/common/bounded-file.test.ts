import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import {
  cappedList,
  readBoundedFile,
  readBoundedFileSync,
  type BoundedReadOptions,
} from '../../src/common/bounded-file';

const dir = mkdtempSync(join(tmpdir(), 'plexus-bounded-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, content: string): string => {
  writeFileSync(join(dir, name), content);
  return join(dir, name);
};

const readers = [
  ['sync', (p: string, o: BoundedReadOptions) => Promise.resolve(readBoundedFileSync(p, o))],
  ['async', readBoundedFile],
] as const;

for (const [flavour, read] of readers) {
  describe(`readBoundedFile (${flavour})`, () => {
    it('reads a regular file of exactly the cap', async () => {
      const r = await read(file(`exact-${flavour}`, 'x'.repeat(5000)), { maxBytes: 5000 });
      assert.ok(r.ok);
      assert.equal(r.value.length, 5000);
    });

    it('refuses a file one byte over the cap without reading it', async () => {
      const r = await read(file(`over-${flavour}`, 'x'.repeat(5001)), { maxBytes: 5000 });
      assert.deepEqual(r.ok ? undefined : [r.error.kind, r.error.reason], ['too-large', 'is larger than 5000 bytes']);
    });

    it('refuses a FIFO at once, without waiting for a writer', async () => {
      const fifo = join(dir, `fifo-${flavour}`);
      execFileSync('mkfifo', [fifo]);
      const r = await read(fifo, { maxBytes: 100, followSymlinks: true });
      assert.deepEqual(r.ok ? undefined : r.error.reason, 'is a FIFO, not a regular file');
    });

    it('refuses a symlink to /dev/zero, followed or not', async () => {
      const link = join(dir, `zero-${flavour}`);
      symlinkSync('/dev/zero', link);
      const followed = await read(link, { maxBytes: 100, followSymlinks: true });
      assert.deepEqual(followed.ok ? undefined : followed.error.reason, 'is a character device, not a regular file');
      const notFollowed = await read(link, { maxBytes: 100 });
      assert.deepEqual(notFollowed.ok ? undefined : notFollowed.error.reason, 'is a symbolic link, not a regular file');
    });

    it('follows a symlink to a regular file only when asked', async () => {
      const target = file(`target-${flavour}`, 'hello');
      const link = join(dir, `link-${flavour}`);
      symlinkSync(target, link);
      const followed = await read(link, { maxBytes: 100, followSymlinks: true });
      assert.equal(followed.ok ? followed.value.toString() : followed.error.reason, 'hello');
      assert.equal((await read(link, { maxBytes: 100 })).ok, false);
    });

    it('says a missing file is missing', async () => {
      const r = await read(join(dir, 'nope'), { maxBytes: 100 });
      assert.deepEqual(r.ok ? undefined : r.error.kind, 'missing');
    });

    it('refuses a directory', async () => {
      const r = await read(dir, { maxBytes: 100 });
      assert.deepEqual(r.ok ? undefined : r.error.reason, 'is a directory, not a regular file');
    });
  });
}

describe('cappedList', () => {
  it('names the first ten and counts the rest', () => {
    const items = Array.from({ length: 13 }, (_, i) => `f${i}`);
    assert.equal(cappedList(items), 'f0; f1; f2; f3; f4; f5; f6; f7; f8; f9; and 3 more');
    assert.equal(cappedList(items.slice(0, 10)), 'f0; f1; f2; f3; f4; f5; f6; f7; f8; f9');
  });
});
