/**
 * An ADD its runtime gave up on (the API aborts its signal when plexus-cni's connection closes) stops at the next safe
 * point, before an attachment or the commit, and is rolled back from the journal as a failed ADD is.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { CniCode } from '../../src/cni/errors';
import { cniCall, engineBed, type EngineBed } from '../support/engine-bed';

let bed: EngineBed;
beforeEach(async () => {
  bed = await engineBed();
});
afterEach(() => bed.remove());

const WHY = 'the runtime closed its connection';

describe('an ADD whose runtime gave up', () => {
  it('before it began: code 11 naming why, and nothing recorded, made or leased', async () => {
    const netns = bed.pod('a');
    const gone = new AbortController();
    gone.abort(WHY);
    const r = await bed.engine.add(cniCall('ADD', 'ca', netns), gone.signal);
    assert.ok(!r.ok);
    assert.equal(r.error.code, CniCode.TryAgainLater);
    assert.equal(r.error.message, `ADD ca/eth0 stopped: ${WHY}`);
    assert.equal(await bed.journal.load('ca', 'eth0'), undefined);
    assert.deepEqual(bed.kernel.links(netns), []);
    assert.deepEqual(await bed.leases(), []);
  });

  it('during its second attachment: the third is not begun, and the first two are undone with their leases', async () => {
    const netns = bed.pod('b');
    const gone = new AbortController();
    // Not a failure: the predicate only notices net1's veth being made, and the runtime leaves then.
    bed.kernel.failWhen((e) => {
      if (e.op.op === 'linkAdd' && e.op.link.kind === 'veth' && e.op.link.peer.name === 'net1') gone.abort(WHY);
      return false;
    });
    const r = await bed.engine.add(cniCall('ADD', 'cb', netns), gone.signal);
    assert.ok(!r.ok);
    assert.equal(r.error.code, CniCode.TryAgainLater);
    assert.match(r.error.message, /stopped: the runtime closed its connection/);
    const made = bed.kernel.log.filter((e) => e.op.op === 'linkAdd' && e.op.link.kind === 'veth');
    assert.equal(made.length, 2, 'eth0 and net1 were made, net2 never begun');
    assert.deepEqual(bed.kernel.links(netns), []);
    assert.deepEqual(await bed.leases(), []);
    assert.equal(await bed.journal.load('cb', 'eth0'), undefined);
  });

  it('never: a signal left unaborted changes nothing of the ADD', async () => {
    const r = await bed.engine.add(cniCall('ADD', 'cc', bed.pod('c')), new AbortController().signal);
    assert.ok(r.ok, !r.ok ? r.error.message : '');
    assert.equal((await bed.leases()).length, 3);
  });
});
