/**
 * Prepared-claim records as hostile input: whatever lies in `<state-dir>/dra/claims` (a FIFO, a directory named like a
 * temp file, `claims` itself a file, a symlink to /dev/zero, a record of 300 MB, a record filed under another claim's
 * name) is named and held, never fatal and never read without a bound; and a memif record's socket is removed only
 * where Prepare makes it, under its resource's socketDir.
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
import { Writable } from 'node:stream';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { parseResources } from '../../src/deviceplugin/config';
import type { ClaimReader, ResourceClaim } from '../../src/dra/claims-api';
import { DraInventory } from '../../src/dra/devices';
import { DraDriver } from '../../src/dra';
import type { KubeApiClient } from '../../src/k8s/api-client';
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

/** A logger whose lines the test reads. */
function recordingLog(): { log: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      done();
    },
  });
  return { log: pino({ level: 'info' }, sink), lines };
}

/** A tree the test made outside socketDir: what a record must never delete. */
function outsideTree(): { dir: string; socket: string } {
  const dir = join(freshDir(), 'victim');
  mkdirSync(join(dir, 'sub'), { recursive: true });
  writeFileSync(join(dir, 'sub', 'data'), 'keep me');
  return { dir, socket: join(dir, 'memif.sock') };
}

const noClaims: ClaimReader = {
  get: (): Promise<{ ok: true; value: ResourceClaim | undefined }> => Promise.resolve({ ok: true, value: undefined }),
};

describe("a memif record's socket is removed only where Prepare makes it", () => {
  for (const [what, socketOf] of [
    ['a path outside socketDir', (_s: string, outside: string) => outside],
    [
      'a path that climbs out of socketDir with ..',
      (s: string, outside: string) => `${s}/memif0/${'../'.repeat(12)}${outside.slice(1)}`,
    ],
    ["another device's directory", (s: string) => join(s, 'memif1', 'memif.sock')],
  ] as const) {
    it(`the stale sweep releases a record whose socket is ${what}, and deletes nothing outside its device's directory`, async () => {
      const socketDir = freshDir();
      mkdirSync(join(socketDir, 'memif0')); // so that a path through it resolves
      const other = join(socketDir, 'memif1');
      mkdirSync(other);
      writeFileSync(join(other, 'memif.sock'), '');
      const outside = outsideTree();
      const { state, dir } = claimsDir();
      const socket = socketOf(socketDir, outside.socket);
      writeFileSync(join(dir, 'uid-h.json'), JSON.stringify(record('uid-h', socket)));
      const prepared = PreparedClaims.open(state);
      assert.equal(prepared.get('uid-h')?.devices[0]?.socket, socket);
      const { log, lines } = recordingLog();
      const preparer = new ClaimPreparer({ claims: noClaims, inventory: memifInventory(socketDir), prepared, log });
      const released = await preparer.releaseStale({
        claims: noClaims,
        pods: { exists: () => Promise.resolve(ok(false)) },
        log,
      });
      assert.deepEqual(released, ['ns/claim-uid-h'], 'the record itself is released');
      assert.equal(readFileSync(join(outside.dir, 'sub', 'data'), 'utf8'), 'keep me', 'the tree outside is whole');
      assert.ok(existsSync(join(other, 'memif.sock')), "memif1's directory is whole");
      const refusal = lines.find((l) => l.msg === "a prepared claim's memif socket directory is not removed");
      assert.ok(refusal, JSON.stringify(lines));
      assert.equal(refusal.claim, 'ns/claim-uid-h');
      assert.equal(refusal.socket, socket);
      assert.match(String(refusal.why), new RegExp(`is not ${join(socketDir, 'memif0', 'memif.sock')}`));
    });
  }
  it('a device directory that is a symlink out of socketDir is not followed: the tree it points at is whole', async () => {
    const socketDir = freshDir();
    const outside = outsideTree();
    symlinkSync(outside.dir, join(socketDir, 'memif0'));
    const { state, dir } = claimsDir();
    writeFileSync(join(dir, 'uid-l.json'), JSON.stringify(record('uid-l', join(socketDir, 'memif0', 'memif.sock'))));
    const { log, lines } = recordingLog();
    const prepared = PreparedClaims.open(state);
    const preparer = new ClaimPreparer({ claims: noClaims, inventory: memifInventory(socketDir), prepared, log });
    await preparer.releaseStale({ claims: noClaims, pods: { exists: () => Promise.resolve(ok(false)) }, log });
    assert.equal(readFileSync(join(outside.dir, 'sub', 'data'), 'utf8'), 'keep me');
    const refusal = lines.find((l) => l.msg === "a prepared claim's memif socket directory is not removed");
    assert.match(String(refusal?.why), /is a symbolic link/);
  });
  it('a socket where Prepare makes it is removed with its directory at Unprepare', async () => {
    const socketDir = freshDir();
    mkdirSync(join(socketDir, 'memif0'));
    const { state, dir } = claimsDir();
    writeFileSync(join(dir, 'uid-g.json'), JSON.stringify(record('uid-g', join(socketDir, 'memif0', 'memif.sock'))));
    const prepared = PreparedClaims.open(state);
    const preparer = new ClaimPreparer({
      claims: noClaims,
      inventory: memifInventory(socketDir),
      prepared,
      log: silent,
    });
    await preparer.unprepare([{ namespace: 'ns', name: 'claim-uid-g', uid: 'uid-g' }]);
    assert.ok(!existsSync(join(socketDir, 'memif0')));
  });
  it('Prepare asked again for a claim whose record names a device no longer offered answers an error naming it', async () => {
    const { state, dir } = claimsDir();
    const gone = { ...record('uid-x'), devices: record('uid-x').devices.map((d) => ({ ...d, device: 'memif7' })) };
    writeFileSync(join(dir, 'uid-x.json'), JSON.stringify(gone));
    const prepared = PreparedClaims.open(state);
    const preparer = new ClaimPreparer({
      claims: noClaims,
      inventory: memifInventory(freshDir()),
      prepared,
      log: silent,
    });
    const answer = await preparer.prepare([{ namespace: 'ns', name: 'claim-uid-x', uid: 'uid-x' }]);
    assert.equal(
      answer['uid-x']?.error,
      'the prepared record of ResourceClaim ns/claim-uid-x names what this node does not offer (n1/plexus.io/memif/memif7: pool n1/plexus.io/memif has no device memif7 in the resources file): unprepare the claim (delete its pod) or fix the resources file',
    );
  });
  it('the memif driver is not handed a socket a record keeps outside its device’s directory', () => {
    const socketDir = freshDir();
    const outside = outsideTree();
    const state = freshDir();
    mkdirSync(join(state, 'dra', 'claims'), { recursive: true });
    writeFileSync(join(state, 'dra', 'claims', 'uid-o.json'), JSON.stringify(record('uid-o', outside.socket)));
    const resources = parseResources({
      resources: [{ name: 'plexus.io/memif', kind: 'memif', count: 2, socketDir, offer: ['dra'] }],
    });
    if (!resources.ok) throw resources.error;
    const api = { request: () => Promise.resolve({ ok: true, value: {} }) } as unknown as KubeApiClient;
    const settings = { nodeName: 'n1', kubeletRoot: freshDir(), stateDir: state };
    const dra = DraDriver.create(resources.value, { api }, settings, silent)!;
    const served = dra.memifSocket('plexus.io/memif', 'memif0');
    assert.ok(served && !served.ok, 'refused');
    assert.match(served.error.message, /is not served: socket .* is not .*memif0\/memif\.sock/);
  });
});
