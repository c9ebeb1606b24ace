/** Start-up recovery on the in-memory engine: spooled DELs replayed once, unusable ones kept aside, the report. */
import assert from 'node:assert/strict';
import { appendFileSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, it } from 'node:test';
import pino from 'pino';
import { recover, replaySpooledDels } from '../../src/engine/recovery';
import { cniCall, engineBed, type EngineBed, forwardedCall } from '../support/engine-bed';

let bed: EngineBed;
beforeEach(async () => {
  bed = await engineBed();
});
afterEach(() => bed.remove());
const log = pino({ level: 'silent' });

it('a spooled DEL is replayed once and its file removed; an unusable one is kept aside as .bad', async () => {
  const netns = bed.pod('a');
  assert.ok((await bed.engine.add(cniCall('ADD', 'ca', netns))).ok);
  const spool = join(bed.dir, 'pending-del');
  mkdirSync(spool);
  writeFileSync(join(spool, 'ca-eth0.json'), JSON.stringify(forwardedCall('DEL', 'ca', netns)));
  writeFileSync(join(spool, 'junk-eth0.json'), '{"env": 42');
  writeFileSync(join(spool, 'add-eth0.json'), JSON.stringify(forwardedCall('ADD', 'cz', netns)));

  assert.equal(await replaySpooledDels(spool, bed.engine, log), 1);
  assert.deepEqual(
    readdirSync(spool).sort(),
    ['add-eth0.json.bad', 'junk-eth0.json.bad'],
    'not JSON, and not a DEL, are kept for an operator',
  );
  assert.deepEqual(await bed.leases(), []);
  assert.deepEqual(bed.kernel.links(netns), []);
  assert.equal(await replaySpooledDels(spool, bed.engine, log), 0, 'nothing is replayed twice');
});

it('recover reports what it did: spooled DELs, transactions undone, leases released', async () => {
  const kept = bed.pod('k');
  assert.ok((await bed.engine.add(cniCall('ADD', 'ck', kept))).ok);
  // A lease whose owner has no record at all (its record was lost).
  await bed.ipam.allocate({
    network: 'red',
    containerId: 'lost',
    ifname: 'net2',
    config: { type: 'host-local', ranges: [[{ subnet: '10.9.2.0/24' }]] } as never,
    requestedIps: [],
  });
  const spool = join(bed.dir, 'spool');
  const report = await recover(spool, bed.engine, log);
  assert.deepEqual(report, { spooledDels: 0, undone: 0, undoFailures: 0, unusableRecords: 0, leasesReleased: 1 });
  assert.ok(existsSync(spool), 'the spool directory is made for plexus-cni');
  assert.deepEqual(
    await bed.leases(),
    ['blue ck eth0:net1', 'podnet ck eth0:eth0', 'red ck eth0:net2'],
    'the live pod keeps all three',
  );
});

it('a record recovery cannot read is not undone, and its container keeps every lease, a half-done one included', async () => {
  const netns = bed.pod('u');
  assert.ok((await bed.engine.add(cniCall('ADD', 'cu', netns))).ok);
  // The record says it was being deleted, then has a line this daemon cannot use: nothing of it may be undone.
  appendFileSync(join(bed.journal.dir, 'cu@eth0.jsonl'), '{"v":1,"t":"deleting","at":"x"}\n{"v":1,"t":"undo"}\n');
  const links = bed.kernel.links(netns);
  const report = await recover(join(bed.dir, 'spool'), bed.engine, log, bed.journal);
  assert.deepEqual(report, { spooledDels: 0, undone: 0, undoFailures: 0, unusableRecords: 1, leasesReleased: 0 });
  assert.deepEqual(await bed.leases(), ['blue cu eth0:net1', 'podnet cu eth0:eth0', 'red cu eth0:net2']);
  assert.deepEqual(bed.kernel.links(netns), links);
  const del = await bed.engine.del(cniCall('DEL', 'cu', netns));
  assert.equal(del.ok, false);
  assert.match(del.ok ? '' : del.error.message, /cu@eth0\.jsonl, line \d+: step: /);
});

it('while the journal is marked lost, no lease without a record is released, by recovery or GC', async () => {
  await bed.ipam.allocate({
    network: 'red',
    containerId: 'gone',
    ifname: 'net2',
    config: { type: 'host-local', ranges: [[{ subnet: '10.9.2.0/24' }]] } as never,
    requestedIps: [],
  });
  await bed.journal.markLost('test');
  assert.equal((await recover(join(bed.dir, 'spool'), bed.engine, log, bed.journal)).leasesReleased, 0);
  assert.deepEqual(await bed.engine.releaseOrphanedLeases(), []);
  assert.deepEqual(await bed.leases(), ['red gone net2']);
  rmSync(join(bed.journal.dir, 'LOST'));
  assert.equal(
    (await bed.engine.releaseOrphanedLeases()).length,
    1,
    'once an operator removes the marker, it is released',
  );
});
