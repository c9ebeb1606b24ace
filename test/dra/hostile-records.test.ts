/**
 * Prepared-claim records as hostile input: whatever lies in `<state-dir>/dra/claims` (a FIFO, a directory named like a
 * temp file, `claims` itself a file, a symlink to /dev/zero, a record of 300 MB, a record filed under another claim's
 * name) is named and held, never fatal and never read without a bound.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { parseResources } from '../../src/deviceplugin/config';
import type { ClaimReader } from '../../src/dra/claims-api';
import { DraInventory } from '../../src/dra/devices';
import { ClaimPreparer } from '../../src/dra/prepare';
import { PreparedClaims, type PreparedClaim } from '../../src/dra/prepared-claims';
import { ok } from '../../src/cni/errors';

const root = mkdtempSync(join(tmpdir(), 'plexus-dra-hostile-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const freshDir = (): string => mkdtempSync(join(root, `d${n++}-`));
const silent = pino({ level: 'silent' });

/** A state dir whose dra/claims directory exists, empty. */
function claimsDir(): { state: string; dir: string } {
  const state = freshDir();
  const dir = join(state, 'dra', 'claims');
  mkdirSync(dir, { recursive: true });
  return { state, dir };
}

/** A record as Prepare writes it, for claim `uid` holding memif0. */
const record = (uid: string, socket?: string): PreparedClaim => ({
  v: 1,
  uid,
  namespace: 'ns',
  name: `claim-${uid}`,
  pods: [{ name: 'p', uid: `pod-${uid}` }],
  devices: [
    {
      request: 'nic',
      pool: 'n1/plexus.io/memif',
      device: 'memif0',
      resourceName: 'plexus.io/memif',
      kind: 'memif',
      deviceID: 'memif0',
      network: { namespace: 'ns', name: 'fast' },
      ...(socket ? { socket, secret: 'abcdefghijklmnopqrst' } : {}),
    },
  ],
  preparedAt: '2026-11-27T00:00:00.000Z',
});

const problemAt = (store: PreparedClaims, path: string): string | undefined =>
  store.problems.find((p) => p.path === path)?.reason;

describe('a bad entry in <state-dir>/dra/claims is named and held, never fatal', () => {
  it('a FIFO named like a record is refused at once (no wait for a writer), named, and left in place', async () => {
    const { state, dir } = claimsDir();
    const fifo = join(dir, 'uid-fifo.json');
    const made = spawn('mkfifo', [fifo]);
    await new Promise((r) => made.once('exit', r));
    // A writer that opens the FIFO after 2 s: an open that waits for one is let go then, not held forever.
    const writer = spawn('timeout', ['10', 'sh', '-c', 'sleep 2; exec 3>"$0"', fifo], { stdio: 'ignore' });
    try {
      const started = Date.now();
      const store = PreparedClaims.open(state);
      const took = Date.now() - started;
      assert.ok(took < 1000, `open took ${took} ms`);
      assert.equal(problemAt(store, fifo), 'is a FIFO, not a regular file');
      assert.ok(lstatSync(fifo).isFIFO(), 'held where it was');
    } finally {
      writer.kill('SIGKILL');
    }
  });
  it('a directory named like a temp file (x.json.tmp) is named and kept, not a fatal EISDIR; a temp file is removed', () => {
    const { state, dir } = claimsDir();
    mkdirSync(join(dir, 'uid-d.json.tmp', 'inside'), { recursive: true });
    writeFileSync(join(dir, 'uid-t.json.tmp'), '{"v":1,');
    const store = PreparedClaims.open(state);
    assert.match(problemAt(store, join(dir, 'uid-d.json.tmp')) ?? '', /^is a directory, not a regular file/);
    assert.ok(existsSync(join(dir, 'uid-d.json.tmp', 'inside')), 'held, with what is in it');
    assert.ok(!existsSync(join(dir, 'uid-t.json.tmp')), 'a write cut off by a crash is removed');
  });
  it('`claims` a regular file: moved aside (kept, named), a fresh directory made, and claims are recorded again', () => {
    const state = freshDir();
    mkdirSync(join(state, 'dra'));
    const path = join(state, 'dra', 'claims');
    writeFileSync(path, 'not a directory');
    const store = PreparedClaims.open(state);
    const reason = problemAt(store, path) ?? '';
    assert.match(
      reason,
      /^is a regular file, not a directory: moved to .*claims\.aside-\d+; no prepared claim is known/,
    );
    const aside = readdirSync(join(state, 'dra')).find((f) => f.startsWith('claims.aside-'))!;
    assert.equal(readFileSync(join(state, 'dra', aside), 'utf8'), 'not a directory', 'moved, not deleted');
    store.record(record('uid-a'));
    assert.deepEqual(
      PreparedClaims.open(state)
        .all()
        .map((c) => c.uid),
      ['uid-a'],
    );
  });
  it('`claims` a symlink to a directory elsewhere: moved aside; nothing is read from or written to where it points', () => {
    const state = freshDir();
    const elsewhere = freshDir();
    writeFileSync(join(elsewhere, 'keep.tmp'), 'not plexusd’s');
    writeFileSync(join(elsewhere, 'uid-e.json'), JSON.stringify(record('uid-e')));
    mkdirSync(join(state, 'dra'));
    symlinkSync(elsewhere, join(state, 'dra', 'claims'));
    const store = PreparedClaims.open(state);
    assert.match(problemAt(store, join(state, 'dra', 'claims')) ?? '', /^is a symbolic link, not a directory: moved/);
    assert.deepEqual(store.all(), []);
    store.record(record('uid-b'));
    assert.deepEqual(readdirSync(elsewhere).sort(), ['keep.tmp', 'uid-e.json']);
  });
  it('a symlink to /dev/zero is refused before a byte is read', () => {
    const { state, dir } = claimsDir();
    symlinkSync('/dev/zero', join(dir, 'uid-z.json'));
    const before = process.memoryUsage().rss;
    const store = PreparedClaims.open(state);
    const grew = process.memoryUsage().rss - before;
    assert.equal(problemAt(store, join(dir, 'uid-z.json')), 'is a symbolic link, not a regular file');
    assert.ok(grew < 64 * 1024 * 1024, `RSS grew by ${grew} bytes`);
  });
  it('a record of 300 MB is refused by its size, without reading it', () => {
    const { state, dir } = claimsDir();
    const big = join(dir, 'uid-big.json');
    writeFileSync(big, '');
    truncateSync(big, 300 * 1024 * 1024); // sparse: 300 MB long, no blocks written
    const before = process.memoryUsage().rss;
    const store = PreparedClaims.open(state);
    const grew = process.memoryUsage().rss - before;
    assert.equal(problemAt(store, big), 'is larger than 1 MiB');
    assert.ok(grew < 64 * 1024 * 1024, `RSS grew by ${grew} bytes`);
    assert.ok(existsSync(big), 'held');
  });
  it('a record filed under another name than its claim UID is not loaded, not released, and kept', async () => {
    const { state, dir } = claimsDir();
    writeFileSync(join(dir, 'renamed.json'), JSON.stringify(record('uid-real')));
    const store = PreparedClaims.open(state);
    assert.equal(store.get('uid-real'), undefined, 'not acted on');
    assert.equal(
      problemAt(store, join(dir, 'renamed.json')),
      'holds claim uid-real, but plexusd names a record <claim uid>.json: not loaded (moved or written by hand?)',
    );
    const claims: ClaimReader = { get: () => Promise.resolve(ok(undefined)) };
    const preparer = new ClaimPreparer({ claims, inventory: memifInventory(freshDir()), prepared: store, log: silent });
    const released = await preparer.releaseStale({
      claims,
      pods: { exists: () => Promise.resolve(ok(false)) },
      log: silent,
    });
    assert.deepEqual(released, [], 'nothing to release');
    assert.ok(existsSync(join(dir, 'renamed.json')), 'kept for the operator');
  });
  it('a directory named like a record is named; Unprepare of its claim still answers', async () => {
    const { state, dir } = claimsDir();
    mkdirSync(join(dir, 'uid-dir.json'));
    const store = PreparedClaims.open(state);
    assert.match(problemAt(store, join(dir, 'uid-dir.json')) ?? '', /^is a directory, not a regular file/);
    const claims: ClaimReader = { get: () => Promise.resolve(ok(undefined)) };
    const preparer = new ClaimPreparer({ claims, inventory: memifInventory(freshDir()), prepared: store, log: silent });
    const answer = await preparer.unprepare([{ namespace: 'ns', name: 'c', uid: 'uid-dir' }]);
    assert.deepEqual(answer, { 'uid-dir': { error: '' } });
  });
  it('a symlink planted at a record’s temp path is not written through', () => {
    const { state, dir } = claimsDir();
    const store = PreparedClaims.open(state);
    const victim = join(freshDir(), 'victim');
    writeFileSync(victim, 'precious');
    symlinkSync(victim, join(dir, 'uid-s.json.tmp'));
    store.record(record('uid-s'));
    assert.equal(readFileSync(victim, 'utf8'), 'precious');
    assert.equal(PreparedClaims.open(state).get('uid-s')?.uid, 'uid-s');
  });
});

/** memif0 and memif1 offered as DRA devices, their sockets under `socketDir`. */
function memifInventory(socketDir: string): DraInventory {
  const parsed = parseResources({
    resources: [{ name: 'plexus.io/memif', kind: 'memif', count: 2, socketDir, offer: ['dra'] }],
  });
  if (!parsed.ok) throw parsed.error;
  return new DraInventory(parsed.value, { nodeName: 'n1' });
}
