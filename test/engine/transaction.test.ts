/**
 * The Transaction every verb uses: begin or reopen a record, journal undo steps, commit, close, and roll back from the
 * record as journaled (in reverse, addresses last), reporting every step that could not be undone. A real journal in
 * a temporary directory; the undo runner is a fake that remembers what it was asked to undo.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CniCode, CniError, err, ok, type Result } from '../../src/cni/errors';
import type { CniResult } from '../../src/cni/types';
import type { UndoStep } from '../../src/drivers/driver';
import { describeUndo } from '../../src/drivers/undo';
import { Journal, type AttachmentMeta, type AttachmentRecord } from '../../src/engine/journal';
import { Transaction, undoRecord, type TransactionPorts } from '../../src/engine/transaction';

const meta = (containerId = 'tx0001', ifname = 'eth0'): AttachmentMeta => ({
  containerId,
  ifname,
  netns: '/var/run/netns/tx-pod',
  pod: { namespace: 'team-a', name: 'web-0' },
  cniNetwork: 'plexus',
  networks: ['team-a/blue', 'team-a/red'],
  startedAt: '2026-11-25T18:00:00.000Z',
});

const blue = { network: 'team-a/blue', ifname: 'net1' };
const red = { network: 'team-a/red', ifname: 'net2' };

const route = (dst: string): UndoStep => ({ kind: 'deleteRoute', netns: '/var/run/netns/tx-pod', route: { dst } });
const lease: UndoStep = { kind: 'releaseIpam', network: 'team-a/blue', containerId: 'tx0001', ifname: 'eth0:net1' };

const result: CniResult = {
  interfaces: [{ name: 'net1', sandbox: '/var/run/netns/tx-pod' }],
  ips: [{ address: '10.7.0.2/24', interface: 0 }],
  routes: [],
};

interface Bed {
  readonly journal: Journal;
  readonly ports: TransactionPorts;
  /** What the fake runner undid, in order (describeUndo of each step). */
  readonly undone: string[];
  /** Records the ports were told were removed. */
  readonly removed: AttachmentRecord[];
}

/** A fresh journal; `fails` names steps (by describeUndo) whose undo fails. */
async function withBed(body: (bed: Bed) => Promise<void>, fails: readonly string[] = []): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), 'plexus-tx-'));
  try {
    const journal = await Journal.open(join(root, 'journal'), false);
    const undone: string[] = [];
    const removed: AttachmentRecord[] = [];
    const undo = (step: UndoStep): Promise<Result<void>> => {
      const what = describeUndo(step);
      undone.push(what);
      const refused = new CniError(CniCode.Internal, `kernel said no to ${what}`);
      return Promise.resolve(fails.includes(what) ? err(refused) : ok(undefined));
    };
    await body({ journal, undone, removed, ports: { journal, undo, removed: (r) => removed.push(r) } });
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

test('a committed transaction leaves a committed record with every step, and closing twice is harmless', () =>
  withBed(async ({ journal, ports, undone }) => {
    const tx = await Transaction.begin(ports, meta());
    await tx.record(route('10.1.0.0/16'), blue);
    await tx.record(lease, blue);
    await tx.commit(result, '1.0.0');
    await tx.close();
    await tx.close();
    const record = await journal.load('tx0001', 'eth0');
    assert.deepEqual(record?.result, result);
    assert.equal(record?.deleting, false);
    assert.deepEqual(record?.undo, [route('10.1.0.0/16'), lease]);
    assert.deepEqual(undone, [], 'a commit undoes nothing');
  }));

test('rollback undoes the journaled steps in reverse order, addresses last, and removes the record', () =>
  withBed(async ({ journal, ports, undone, removed }) => {
    const tx = await Transaction.begin(ports, meta());
    await tx.record(lease, blue);
    await tx.record(route('10.1.0.0/16'), blue);
    await tx.record(route('10.2.0.0/16'), red);
    await tx.record(route('10.3.0.0/16'), red);
    const r = await tx.rollback();
    assert.ok(r.ok, r.ok ? '' : r.error.message);
    assert.deepEqual(undone, [
      describeUndo(route('10.3.0.0/16')),
      describeUndo(route('10.2.0.0/16')),
      describeUndo(route('10.1.0.0/16')),
      describeUndo(lease),
    ]);
    assert.equal(await journal.load('tx0001', 'eth0'), undefined, 'the record is gone');
    assert.deepEqual(
      removed.map((x) => x.meta.containerId),
      ['tx0001'],
      'the ports are told, once',
    );
  }));

test('a reopened transaction appends to the existing record, and its rollback undoes the steps of both', () =>
  withBed(async ({ journal, ports, undone }) => {
    const first = await Transaction.begin(ports, meta());
    await first.record(route('10.1.0.0/16'), blue);
    await first.commit(result, '1.0.0');
    await first.close();
    await assert.rejects(Transaction.begin(ports, meta()), { code: 'EEXIST' }, 'begin never replaces a record');
    const again = await Transaction.reopen(ports, 'tx0001', 'eth0');
    await again.change({ add: [red], remove: [] });
    await again.record(route('10.2.0.0/16'), red);
    await again.close();
    const record = await journal.load('tx0001', 'eth0');
    assert.deepEqual(record?.undo, [route('10.1.0.0/16'), route('10.2.0.0/16')]);
    assert.deepEqual(record?.changing?.add, [red], 'the change line is in the same record');
    const r = await (await Transaction.reopen(ports, 'tx0001', 'eth0')).rollback();
    assert.ok(r.ok);
    assert.deepEqual(undone, [describeUndo(route('10.2.0.0/16')), describeUndo(route('10.1.0.0/16'))]);
  }));

test('undoAttachments undoes one attachment only and retires it; the others stay recorded', () =>
  withBed(async ({ journal, ports, undone }) => {
    const tx = await Transaction.begin(ports, meta());
    await tx.record(route('10.1.0.0/16'), blue);
    await tx.record(route('10.2.0.0/16'), red);
    await tx.commit(result, '1.0.0');
    const r = await tx.undoAttachments([red]);
    await tx.close();
    assert.deepEqual(r, { ok: true, value: undefined });
    assert.deepEqual(undone, [describeUndo(route('10.2.0.0/16'))]);
    assert.deepEqual((await journal.load('tx0001', 'eth0'))?.undo, [route('10.1.0.0/16')]);
  }));

test('a failing undo step is reported by name, the others still run, and the record stays for a retry', () =>
  withBed(
    async ({ journal, ports, undone, removed }) => {
      const tx = await Transaction.begin(ports, meta());
      await tx.record(route('10.1.0.0/16'), blue);
      await tx.record(route('10.2.0.0/16'), red);
      const r = await tx.rollback();
      assert.ok(!r.ok);
      assert.equal(r.error.code, CniCode.Internal);
      const named = /could not undo 1 step\(s\) of tx0001\/eth0: delete route 10\.2\.0\.0\/16: kernel said no/;
      assert.match(r.error.message, named);
      assert.equal(undone.length, 2, 'undo continues past a failure');
      const record = await journal.load('tx0001', 'eth0');
      assert.equal(record?.deleting, true, 'the record stays, marked deleting, so recovery or DEL finishes it');
      assert.deepEqual(removed, []);
      // Once the kernel agrees, the same one code path finishes it.
      const retried = await undoRecord({ ...ports, undo: () => Promise.resolve(ok(undefined)) }, record);
      assert.ok(retried.ok);
      assert.equal(await journal.load('tx0001', 'eth0'), undefined);
    },
    [describeUndo(route('10.2.0.0/16'))],
  ));
