/**
 * The background teardown on the in-memory kernel: pods attached by the real engine, their records' link steps run by
 * the queue with the real undo handlers, IPAM and journal. What it must guarantee: a lease outlives every link that
 * carried it, the record is closed only when all is undone, a failure is retried (or handed back to a caller that
 * waits), and a batch deletes the links of all its pods at once.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import pino from 'pino';
import { CniCode, CniError, err } from '../../../src/cni/errors';
import { DriverRegistry } from '../../../src/drivers/registry';
import { driverStep, type UndoStep } from '../../../src/drivers/driver';
import { TeardownQueue, type TeardownDeps, type TeardownJob } from '../../../src/engine/teardown/queue';
import { placeForBackground, splitTeardown } from '../../../src/engine/teardown/steps';
import { cniCall, engineBed, type EngineBed } from '../../support/engine-bed';

let bed: EngineBed;
beforeEach(async () => {
  bed = await engineBed();
});
afterEach(() => bed.remove());

const drivers = new DriverRegistry();
const silent = pino({ level: 'silent' });

/** A gate the queue waits on before each batch: closed until opened. */
function gate(): { hold: () => Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { hold: () => opened, open };
}

function queueOn(overrides: Partial<TeardownDeps> = {}): TeardownQueue {
  return new TeardownQueue({
    runStep: (step) => drivers.undo(step, { kernel: bed.kernel, ipam: bed.ipam }),
    finish: (job) => bed.journal.remove(job.record.meta.containerId, job.record.meta.ifname),
    log: silent,
    retryMs: { first: 5, max: 20 },
    ...overrides,
  });
}

/** ADDs pod `cid` (podnet, blue, red) and answers its record's background job, as DEL would queue it. */
async function attached(cid: string): Promise<TeardownJob> {
  const added = await bed.engine.add(cniCall('ADD', cid, bed.pod(cid)));
  assert.ok(added.ok, !added.ok ? added.error.message : '');
  const entry = await bed.journal.reopen(cid, 'eth0');
  await entry.markDeleting();
  await entry.close();
  const record = (await bed.journal.load(cid, 'eth0'))!;
  return { record, steps: splitTeardown(record.undo).later };
}

const hostVeths = (): string[] => bed.kernel.links().filter((l) => l.startsWith('veth'));
const until = async (what: () => boolean | Promise<boolean>): Promise<void> => {
  for (let i = 0; i < 500 && !(await what()); i++) await new Promise((r) => setTimeout(r, 2));
  assert.ok(await what(), 'condition not reached in time');
};

describe('the background teardown', () => {
  it('a DEL defers links and leases and undoes a delegated plugin, a host device, a switch port and a socket dir first', () => {
    const steps: UndoStep[] = [
      { kind: 'releaseIpam', network: 'n', containerId: 'c', ifname: 'eth0:eth0' },
      { kind: 'deleteLink', name: 'vethx' },
      driverStep('delegate', 'delegateDel', 1, {
        plugin: 'ptp',
        config: '{}',
        env: { containerId: 'c', netns: '/n', ifname: 'net1', args: '', path: '/p' },
      }),
      driverStep('host-device', 'returnLink', 1, { netns: '/n', name: 'net2', hostName: 'eno1' }),
      { kind: 'deleteRoute', netns: '/n', route: { dst: '10.0.0.0/8' } },
      driverStep('memif', 'removeSocketDir', 1, { path: '/run/x' }),
    ];
    const split = splitTeardown(steps);
    const named = (s: UndoStep): string => (s.kind === 'driver' ? s.step : s.kind);
    assert.deepEqual(split.now.map(named), ['delegateDel', 'returnLink', 'removeSocketDir']);
    assert.deepEqual(
      split.later.map((s) => s.kind),
      ['releaseIpam', 'deleteLink', 'deleteRoute'],
    );
  });

  it('a host link is deleted from the daemon netns path, off the kernel worker; pod links and other steps stay as recorded', () => {
    const host: UndoStep = { kind: 'deleteLink', name: 'vethx' };
    const pod: UndoStep = { kind: 'deleteLink', netns: '/run/netns/p', name: 'net1', mark: 7 };
    assert.deepEqual(placeForBackground(host, '/proc/self/ns/net'), {
      kind: 'deleteLink',
      name: 'vethx',
      netns: '/proc/self/ns/net',
    });
    assert.equal(placeForBackground(pod, '/proc/self/ns/net'), pod);
    assert.equal(placeForBackground(host, undefined), host);
  });

  it('holds every lease and the record until the links are gone, then releases the leases and closes the record', async () => {
    const held = gate();
    const queue = queueOn({ hold: held.hold });
    const job = await attached('ca');
    assert.ok(queue.add(job));
    assert.equal(queue.has('ca', 'eth0'), true);
    await new Promise((r) => setTimeout(r, 10));
    assert.equal(hostVeths().length, 3, 'held: the links are still there');
    assert.equal((await bed.leases()).length, 3, 'held: so are the leases');
    held.open();
    await until(() => queue.size === 0);
    assert.deepEqual(hostVeths(), []);
    assert.deepEqual(await bed.leases(), []);
    assert.deepEqual(await bed.journal.list(), []);
  });

  it('a repeated add of a pending attachment is refused (a second DEL queues nothing)', async () => {
    const held = gate();
    const queue = queueOn({ hold: held.hold });
    const job = await attached('cb');
    assert.equal(queue.add(job), true);
    assert.equal(queue.add(job), false);
    held.open();
    await until(() => queue.size === 0);
  });

  it('the pods of one batch delete their links side by side, and no lease goes before its own links are gone', async () => {
    const held = gate();
    let inFlight = 0;
    let most = 0;
    const order: string[] = [];
    const queue = queueOn({
      hold: held.hold,
      runStep: async (step) => {
        inFlight++;
        most = Math.max(most, inFlight);
        await new Promise((r) => setTimeout(r, 5));
        inFlight--;
        order.push(step.kind);
        return drivers.undo(step, { kernel: bed.kernel, ipam: bed.ipam });
      },
    });
    for (const cid of ['c1', 'c2', 'c3', 'c4']) queue.add(await attached(cid));
    held.open();
    await until(() => queue.size === 0);
    assert.equal(most, 12, 'the 12 host veths of 4 pods were deleted at once');
    assert.deepEqual(order.slice(0, 12), Array(12).fill('deleteLink'), 'every link before any lease');
    assert.deepEqual(await bed.leases(), []);
  });

  it("a link that cannot be deleted keeps the pod's leases and record; the retry finishes the teardown", async () => {
    const job = await attached('cd');
    const stubborn = job.steps.find((s) => s.kind === 'deleteLink')!;
    let refusals = 0;
    const queue = queueOn({
      runStep: async (step) => {
        if (step === stubborn && refusals < 3) {
          refusals++;
          return err(new CniError(CniCode.Internal, 'EBUSY'));
        }
        return drivers.undo(step, { kernel: bed.kernel, ipam: bed.ipam });
      },
    });
    queue.add(job);
    await until(() => refusals >= 2);
    assert.equal((await bed.leases()).length, 3, 'after two failed attempts every lease is still held');
    assert.equal((await bed.journal.load('cd', 'eth0'))?.deleting, true, 'the record stays, deleting');
    await until(() => queue.size === 0);
    assert.equal(refusals, 3);
    assert.deepEqual(hostVeths(), []);
    assert.deepEqual(await bed.leases(), []);
    assert.deepEqual(await bed.journal.list(), []);
  });

  it("counts what the metrics show: pending teardowns by state, the oldest one's wait, failed attempts", async () => {
    const held = gate();
    let refuse = true;
    const queue = queueOn({
      hold: held.hold,
      retryMs: { first: 60_000, max: 60_000 },
      runStep: async (step) =>
        refuse && step.kind === 'deleteLink'
          ? err(new CniError(CniCode.Internal, 'EBUSY'))
          : drivers.undo(step, { kernel: bed.kernel, ipam: bed.ipam }),
    });
    assert.deepEqual(queue.stats(), { queued: 0, running: 0, retrying: 0, oldestSeconds: 0, failedAttempts: 0 });
    queue.add(await attached('ce'));
    await new Promise((r) => setTimeout(r, 30));
    const waiting = queue.stats();
    assert.deepEqual([waiting.queued, waiting.running, waiting.retrying, waiting.failedAttempts], [1, 0, 0, 0]);
    assert.ok(waiting.oldestSeconds >= 0.025, `the oldest has waited ${waiting.oldestSeconds} s`);
    held.open();
    await until(() => queue.stats().retrying === 1);
    assert.equal(queue.stats().failedAttempts, 1);
    refuse = false;
    const outcome = await queue.settle('ce', 'eth0');
    assert.equal(outcome?.ok, true);
    assert.deepEqual(queue.stats(), { queued: 0, running: 0, retrying: 0, oldestSeconds: 0, failedAttempts: 1 });
    assert.deepEqual(hostVeths(), []);
  });

  it('settle waits for a pending teardown; a failed one is handed back to the caller, not retried behind it', async () => {
    const held = gate();
    const queue = queueOn({ hold: held.hold });
    const ok = await attached('ce');
    const bad = await attached('cf');
    queue.add(ok);
    queue.add(bad);
    const badVeth = bad.steps.find((s) => s.kind === 'deleteLink')!;
    bed.kernel.failWhen(
      (e) => e.op.op === 'linkDel' && 'name' in e.op && badVeth.kind === 'deleteLink' && e.op.name === badVeth.name,
    );
    const settled = Promise.all([queue.settle('ce', 'eth0'), queue.settle('cf', 'eth0')]);
    assert.equal(await queue.settle('none', 'eth0'), undefined, 'nothing pending: nothing to wait for');
    held.open();
    const [first, second] = await settled;
    assert.equal(first?.ok, true);
    assert.equal(second?.ok, false);
    assert.match(second?.ok === false ? second.error.message : '', /could not undo 1 step\(s\): delete link veth/);
    assert.equal(queue.size, 0, 'the failed one is no longer queued');
    assert.equal((await bed.journal.load('cf', 'eth0'))?.deleting, true, 'its record stays for the caller');
  });

  it('settleNetns waits for every teardown in that netns; a failed one stays queued and is retried', async () => {
    const held = gate();
    const queue = queueOn({ hold: held.hold });
    const first = await attached('cj');
    const other = await attached('ck');
    queue.add(first);
    queue.add(other);
    bed.kernel.failWhen((e) => e.op.op === 'linkDel');
    let settled = false;
    const waiting = queue.settleNetns(first.record.meta.netns).then(() => (settled = true));
    await new Promise((r) => setTimeout(r, 10));
    assert.equal(settled, false, 'held: still waiting');
    held.open();
    await waiting;
    assert.equal(queue.has('cj', 'eth0'), true, 'its failed attempt is retried, not handed back');
    assert.equal(queue.has('ck', 'eth0'), false, "another netns's teardown was not waited for, but went on its own");
    await until(() => queue.size === 0);
  });

  it('drain finishes pending teardowns before a stop, and answers how many were left when it runs out of time', async () => {
    const queue = queueOn();
    queue.add(await attached('cg'));
    assert.equal(await queue.drain(2000), 0);
    assert.deepEqual(await bed.journal.list(), []);

    const held = gate();
    const stuck = queueOn({ hold: held.hold });
    stuck.add(await attached('ch'));
    assert.equal(await stuck.drain(20), 1, 'one left, its record says deleting for the next start');
    assert.equal((await bed.journal.load('ch', 'eth0'))?.deleting, true);
    assert.equal(stuck.add(await attached('ci')), false, 'a drained queue takes no more');
    held.open();
  });
});
