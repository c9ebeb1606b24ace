import assert from 'node:assert/strict';
import { readlinkSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { Kernel } from '../../src/kernel/kernel';
import { NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('pki');
const fx = new NetnsFixture(prefix);
let kernel: Kernel;
let alone = true;

before(() => {
  kernel = new Kernel(1, undefined, { inlineWhen: () => alone });
});
after(async () => {
  fx.cleanup();
  await kernel.close();
});

const ownNetns = (): string => readlinkSync('/proc/thread-self/ns/net');

describe('kernel batches on the calling thread while the daemon has nothing else to do (inlineWhen)', () => {
  it('runs a quick batch here, in the pod netns, and leaves this thread in its own netns', async () => {
    const pod = fx.create('here');
    const host = `${prefix}h0`;
    fx.trackHostLink(host);
    const home = ownNetns();
    const before = kernel.batchesRunHere;
    const r = await kernel.batch(undefined, [
      { op: 'linkAdd', link: { kind: 'veth', name: host, up: true, peer: { name: 'eth0', netns: pod.path } } },
      { op: 'linkSet', name: 'eth0', up: true, at: pod.path },
      { op: 'addrAdd', name: 'eth0', address: '10.251.0.2/24', noDad: true, at: pod.path },
      { op: 'linkGet', name: 'eth0', at: pod.path },
    ]);
    assert.ok(r.ok, r.ok ? '' : r.error.message);
    assert.equal(kernel.batchesRunHere, before + 1, 'the batch ran on this thread');
    assert.equal(r.value[3]?.up, true, 'eth0 is up in the pod netns');
    assert.equal(ownNetns(), home, 'this thread is back in its own netns');
  });

  it('answers a refused op as the worker does: the failure, its errno and the index of the op', async () => {
    const pod = fx.create('fail');
    const r = await kernel.batch(pod.path, [
      { op: 'linkAdd', link: { kind: 'dummy', name: 'd0', up: true } },
      { op: 'linkAdd', link: { kind: 'dummy', name: 'd0', up: true } },
    ]);
    if (!r.ok && r.error.index === 0) return; // no dummy driver in this kernel: nothing to compare
    assert.equal(r.ok, false);
    assert.ok(!r.ok && r.error.is('EEXIST'), 'the second create is refused with EEXIST');
    assert.equal(!r.ok && r.error.index, 1);
  });

  it('never lets a batch overtake one still running on the worker', async () => {
    const pod = fx.create('order');
    const host = `${prefix}o0`;
    fx.trackHostLink(host);
    const veth = { kind: 'veth' as const, name: host, up: true, peer: { name: 'eth0', netns: pod.path } };
    const made = await kernel.batch(undefined, [{ op: 'linkAdd', link: veth }]);
    assert.ok(made.ok);
    // The deletion goes to the worker (it waits for RCU); the create right behind it must wait for it, or meet EEXIST.
    const deleting = kernel.batch(undefined, [{ op: 'linkDel', name: host }]);
    const here = kernel.batchesRunHere;
    const remade = await kernel.batch(undefined, [{ op: 'linkAdd', link: veth }]);
    assert.ok((await deleting).ok);
    assert.ok(remade.ok, remade.ok ? '' : `the create overtook the deletion: ${remade.error.message}`);
    assert.equal(kernel.batchesRunHere, here, 'the create went to the worker, behind the deletion');
  });

  it('sends a batch to the worker while the daemon says other calls are in flight', async () => {
    const pod = fx.create('busy');
    const here = kernel.batchesRunHere;
    alone = false;
    try {
      const r = await kernel.batch(pod.path, [{ op: 'linkGet', name: 'lo' }]);
      assert.ok(r.ok);
    } finally {
      alone = true;
    }
    assert.equal(kernel.batchesRunHere, here, 'the batch went to the worker');
  });
});
