/**
 * Where the background deletes links, on the real kernel: a host link through the daemon's own netns path (so the
 * deletion's RCU wait is on a pool thread, not the kernel worker), and a link of a pod whose netns the runtime has
 * already removed, through the netns the teardown held open.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Kernel } from '../../../src/kernel/kernel';
import { nsfsDevice, pinNetns } from '../../../src/engine/teardown/pinned-netns';
import { hostLinksWithPrefix, ip, NetnsFixture, uniquePrefix } from '../../support/netns';

const prefix = uniquePrefix('ptp');
const fx = new NetnsFixture(prefix);
let kernel: Kernel;

before(() => {
  kernel = new Kernel();
});
after(async () => {
  await kernel.close();
  fx.cleanup();
});

describe('where the background teardown deletes links', () => {
  it("a host link is deleted through /proc/self/ns/net, the daemon's own netns", async () => {
    const name = `${prefix}h`;
    fx.trackHostLink(name);
    ip('link', 'add', name, 'type', 'veth', 'peer', 'name', `${name}p`);
    const r = await kernel.deleteLink('/proc/self/ns/net', name);
    assert.ok(r.ok, !r.ok ? r.error.message : '');
    assert.deepEqual(hostLinksWithPrefix(name), []);
  });

  it('a pod netns held open stays reachable after the runtime removed it, until its link is deleted', async () => {
    const ns = fx.create('p');
    ip('-n', ns.name, 'link', 'add', 'net1', 'type', 'veth', 'peer', 'name', 'net1p');
    ip('-n', ns.name, 'addr', 'add', '192.0.2.7/24', 'dev', 'net1');
    const pin = pinNetns(ns.path, nsfsDevice());
    assert.ok(pin, 'the netns is held');
    ip('netns', 'del', ns.name);
    try {
      const there = await kernel.getLink(pin.path, 'net1');
      assert.ok(there.ok && there.value?.name === 'net1', 'the link (and its address) outlives the netns path');
      const r = await kernel.deleteLink(pin.path, 'net1');
      assert.ok(r.ok, !r.ok ? r.error.message : '');
      const gone = await kernel.getLink(pin.path, 'net1');
      assert.ok(gone.ok && gone.value === null, 'deleted through the held netns');
    } finally {
      pin.release();
    }
  });

  it('nothing is held for a path that is gone or is not a namespace', () => {
    assert.equal(pinNetns(`/var/run/netns/${prefix}-none`, nsfsDevice()), undefined);
    assert.equal(pinNetns('/proc/self/status', nsfsDevice()), undefined);
  });
});
