import assert from 'node:assert/strict';
import { describe, it, test } from 'node:test';
import type { UndoStep } from '../../src/drivers/driver';
import { genericUndo, undoRunner, undoStages } from '../../src/drivers/undo';
import { DriverRegistry } from '../../src/drivers/registry';

/** The built-in drivers, the delegate included. */
const builtInForTest = () => {
  const registry = new DriverRegistry();
  return [...registry.types().map((t) => registry.get(t)!), registry.delegate];
};

const release = (network: string): UndoStep => ({ kind: 'releaseIpam', network, containerId: 'c1', ifname: 'eth0' });
const link = (name: string, netns?: string): UndoStep => ({ kind: 'deleteLink', name, ...(netns ? { netns } : {}) });
const names = (stages: UndoStep[][]): string[][] => stages.map((s) => s.map((x) => (x.kind === 'releaseIpam' ? `ip:${x.network}` : x.kind === 'deleteLink' ? `link:${x.name}` : x.kind)));

describe('undo stages', () => {
  it('deletes the links of a three-network pod together, then releases the addresses, newest first', () => {
    // As recorded by ADD: per network, the lease's release first, then the link's deletion.
    const recorded = [release('podnet'), link('vethA'), release('blue'), link('vethB'), release('lan'), link('net2', '/var/run/netns/p')];
    assert.deepEqual(names(undoStages(recorded)), [['link:net2', 'link:vethB', 'link:vethA'], ['ip:lan'], ['ip:blue'], ['ip:podnet']]);
  });

  it('keeps every other step in reverse order, alone, and never merges links across one', () => {
    const delegated: UndoStep = { kind: 'delegateDel', plugin: '/usr/lib/cni/ptp', config: '{}', env: { containerId: 'c1', netns: '', ifname: 'net1', args: '', path: '' } };
    const route: UndoStep = { kind: 'deleteRoute', route: { dst: '0.0.0.0/0', gw: '10.0.0.1', dev: 'net1' } };
    const recorded = [release('podnet'), link('vethA'), delegated, link('vethB'), route];
    assert.deepEqual(names(undoStages(recorded)), [['deleteRoute'], ['link:vethB'], ['delegateDel'], ['link:vethA'], ['ip:podnet']]);
  });

  it('has nothing to do for an empty record', () => {
    assert.deepEqual(undoStages([]), []);
  });
});

test('the undo runner refuses a step kind no driver of the registry owns, naming it', async () => {
  const run = undoRunner([genericUndo]);
  const step = { kind: 'returnLink', netns: '/var/run/netns/x', name: 'net1', hostName: 'eth9' } as const;
  const r = await run(step, { kernel: undefined as never, ipam: undefined as never });
  assert.ok(!r.ok);
  assert.equal(r.error.message, 'no driver of this plexusd can undo a step of kind "returnLink"');
});

test('every step kind is owned by the generic handlers or by exactly one built-in driver', () => {
  const owners = [genericUndo, ...[...builtInForTest()].flatMap((d) => (d.undo ? [d.undo] : []))].flatMap((h) => Object.keys(h));
  assert.deepEqual([...owners].sort(), ['delegateDel', 'deleteLink', 'deleteRoute', 'deleteSwitchPort', 'releaseIpam', 'removeSocketDir', 'returnLink']);
});
