/** Start-up recovery on the in-memory engine: spooled DELs replayed once, unusable ones kept aside, the report. */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
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
  assert.deepEqual(readdirSync(spool).sort(), ['add-eth0.json.bad', 'junk-eth0.json.bad'], 'not JSON, and not a DEL, are kept for an operator');
  assert.deepEqual(await bed.leases(), []);
  assert.deepEqual(bed.kernel.links(netns), []);
  assert.equal(await replaySpooledDels(spool, bed.engine, log), 0, 'nothing is replayed twice');
});

it('recover reports what it did: spooled DELs, transactions undone, leases released', async () => {
  const kept = bed.pod('k');
  assert.ok((await bed.engine.add(cniCall('ADD', 'ck', kept))).ok);
  // A lease whose owner has no record at all (its record was lost).
  await bed.ipam.allocate({ network: 'red', containerId: 'lost', ifname: 'net2', config: { type: 'host-local', ranges: [[{ subnet: '10.9.2.0/24' }]] } as never, requestedIps: [] });
  const spool = join(bed.dir, 'spool');
  const report = await recover(spool, bed.engine, log);
  assert.deepEqual(report, { spooledDels: 0, undone: 0, undoFailures: 0, unusableRecords: 0, leasesReleased: 1 });
  assert.ok(existsSync(spool), 'the spool directory is made for plexus-cni');
  assert.deepEqual(await bed.leases(), ['blue ck net1', 'podnet ck eth0', 'red ck net2'], 'the live pod keeps all three');
});
