import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it, test } from 'node:test';
import type { UndoStep } from '../../src/drivers/driver';
import { genericUndo, undoRunner, undoStages } from '../../src/drivers/undo';
import { DriverRegistry } from '../../src/drivers/registry';
import { FakeKernel } from '../support/fake-kernel';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';
import { delegateDelStep } from '../../src/drivers/delegate';
import { returnLinkStep } from '../../src/drivers/host-device';

/** The built-in drivers, the delegate included. */
const builtInForTest = () => {
  const registry = new DriverRegistry();
  return [...registry.types().map((t) => registry.get(t)!), registry.delegate];
};

const release = (network: string): UndoStep => ({ kind: 'releaseIpam', network, containerId: 'c1', ifname: 'eth0' });
const link = (name: string, netns?: string): UndoStep => ({ kind: 'deleteLink', name, ...(netns ? { netns } : {}) });
const names = (stages: UndoStep[][]): string[][] =>
  stages.map((s) =>
    s.map((x) => (x.kind === 'releaseIpam' ? `ip:${x.network}` : x.kind === 'deleteLink' ? `link:${x.name}` : x.kind)),
  );

describe('undo stages', () => {
  it('deletes the links of a three-network pod together, then releases the addresses, newest first', () => {
    // As recorded by ADD: per network, the lease's release first, then the link's deletion.
    const recorded = [
      release('podnet'),
      link('vethA'),
      release('blue'),
      link('vethB'),
      release('lan'),
      link('net2', '/var/run/netns/p'),
    ];
    assert.deepEqual(names(undoStages(recorded)), [
      ['link:net2', 'link:vethB', 'link:vethA'],
      ['ip:lan'],
      ['ip:blue'],
      ['ip:podnet'],
    ]);
  });

  it('keeps every other step in reverse order, alone, and never merges links across one', () => {
    const delegated = delegateDelStep({
      plugin: join(DEBIAN_PLUGINS, 'ptp'),
      config: '{}',
      env: { containerId: 'c1', netns: '', ifname: 'net1', args: '', path: '' },
    });
    const route: UndoStep = { kind: 'deleteRoute', route: { dst: '0.0.0.0/0', gw: '10.0.0.1', dev: 'net1' } };
    const recorded = [release('podnet'), link('vethA'), delegated, link('vethB'), route];
    assert.deepEqual(names(undoStages(recorded)), [
      ['deleteRoute'],
      ['link:vethB'],
      ['driver'],
      ['link:vethA'],
      ['ip:podnet'],
    ]);
  });

  it('has nothing to do for an empty record', () => {
    assert.deepEqual(undoStages([]), []);
  });
});

test('the undo runner refuses a step of a driver it does not have, naming the driver and kind', async () => {
  const run = undoRunner([]);
  const step = returnLinkStep({ netns: '/var/run/netns/x', name: 'net1', hostName: 'eth9' });
  const r = await run(step, { kernel: undefined as never, ipam: undefined as never });
  assert.ok(!r.ok);
  assert.equal(r.error.message, 'no driver of this plexusd can undo a step of kind "host-device/returnLink"');
});

test('a driver step of a newer version than the driver reads is refused, not guessed at', async () => {
  const step = { ...returnLinkStep({ netns: '/var/run/netns/x', name: 'net1', hostName: 'eth9' }), v: 9 };
  const r = await new DriverRegistry().undo(step, { kernel: undefined as never, ipam: undefined as never });
  assert.ok(!r.ok);
  assert.match(r.error.message, /version 9 was recorded by a newer plexusd; this one reads up to version 1/);
});

test('each driver declares its own step kinds; the generic ones belong to no driver', () => {
  const owners = builtInForTest().flatMap((d) => Object.keys(d.undo ?? {}).map((k) => `${d.type}/${k}`));
  assert.deepEqual(owners.sort(), [
    'delegate/delegateDel',
    'host-device/returnLink',
    'memif/deleteSwitchPort',
    'memif/removeSocketDir',
  ]);
  assert.deepEqual(Object.keys(genericUndo).sort(), ['deleteLink', 'deleteRoute', 'releaseIpam']);
});

describe('deleting a link by its identity', () => {
  const netns = '/var/run/netns/pod';
  const setup = (): Promise<FakeKernel> => {
    const kernel = new FakeKernel();
    kernel.createNetns(netns);
    return Promise.resolve(kernel);
  };
  const run = (step: UndoStep, kernel: FakeKernel) => undoRunner([])(step, { kernel, ipam: undefined as never });

  it('deletes a marked pod link that carries its mark', async () => {
    const kernel = await setup();
    await kernel.batch(netns, [
      { op: 'linkAdd', link: { kind: 'macvlan', name: 'net1', master: 'x', mode: 'bridge', group: 7 } },
    ]);
    assert.ok((await run({ kind: 'deleteLink', netns, name: 'net1', mark: 7 }, kernel)).ok);
    assert.deepEqual(kernel.links(netns), []);
  });

  it('leaves a link of that name without the mark (not made by Plexus for this attachment), and succeeds', async () => {
    const kernel = await setup();
    await kernel.batch(netns, [{ op: 'linkAdd', link: { kind: 'bridge', name: 'net1' } }]);
    assert.ok((await run({ kind: 'deleteLink', netns, name: 'net1', mark: 7 }, kernel)).ok);
    assert.deepEqual(kernel.links(netns), ['net1']);
  });

  it('succeeds when the pod netns is gone', async () => {
    const kernel = await setup();
    kernel.deleteNetns(netns);
    assert.ok((await run({ kind: 'deleteLink', netns, name: 'net1', mark: 7 }, kernel)).ok);
  });

  it("never deletes lo: an older plexusd's step naming it has nothing to undo", async () => {
    const kernel = await setup();
    await kernel.batch(netns, [{ op: 'linkAdd', link: { kind: 'bridge', name: 'lo' } }]);
    assert.ok((await run({ kind: 'deleteLink', netns, name: 'lo' }, kernel)).ok);
    assert.deepEqual(kernel.links(netns), ['lo']);
    assert.equal(kernel.log.filter((e) => e.op.op === 'linkDel').length, 0);
  });

  it('deletes by name a step without a mark (a host veth, or a step of an older plexusd)', async () => {
    const kernel = await setup();
    await kernel.batch(netns, [{ op: 'linkAdd', link: { kind: 'bridge', name: 'net1' } }]);
    assert.ok((await run({ kind: 'deleteLink', netns, name: 'net1' }, kernel)).ok);
    assert.deepEqual(kernel.links(netns), []);
  });
});
