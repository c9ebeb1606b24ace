/** Hot-plug's diff of a running pod's networks against its annotation now: what is kept, removed, added and named. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { planChange, type CurrentAttachment } from '../../src/engine/change-plan';
import type { NetworkDefinition } from '../../src/networks/nad';
import type { PlannedAttachment } from '../../src/networks/planner';

const network = (key: string): NetworkDefinition => ({
  namespace: 'default',
  name: key.split('/')[1]!,
  key,
  annotations: {},
  cniVersion: '1.0.0',
  cniName: key,
  plugins: [],
  source: 't',
});
/** A planned attachment as a fresh plan names it (its name is discarded unless explicit). */
const want = (key: string, ifname: string, explicitName = false, defaultRoute = false): PlannedAttachment => ({
  ifname,
  explicitName,
  network: network(key),
  isDefault: false,
  forceDelegate: false,
  defaultRoute: false,
  ...(defaultRoute
    ? { selection: { namespace: 'default', name: key.split('/')[1]!, index: 0, defaultRoute: ['10.0.0.1'] } }
    : {}),
});
const has = (network: string, ifname: string, isDefault = false): CurrentAttachment => ({
  network: `default/${network}`,
  ifname,
  isDefault,
});
const plan = (current: CurrentAttachment[], wanted: PlannedAttachment[]) => planChange(current, wanted, (p) => p);
const names = (r: ReturnType<typeof plan>) => {
  assert.ok(r.ok, r.ok ? '' : r.error.message);
  return {
    add: r.value.add.map((a) => `${a.step.network.key}@${a.ifname}`),
    remove: r.value.remove.map((a) => `${a.network}@${a.ifname}`),
    keep: r.value.keep.map((a) => `${a.network}@${a.ifname}`),
  };
};

describe("the change of a running pod's networks", () => {
  const pod = [has('podnet', 'eth0', true), has('a', 'net1'), has('b', 'net2')];

  it('is nothing when the annotation asks for what the pod has, whatever names a fresh plan gives', () => {
    assert.deepEqual(names(plan(pod, [want('default/a', 'net1'), want('default/b', 'net2')])), {
      add: [],
      remove: [],
      keep: ['default/podnet@eth0', 'default/a@net1', 'default/b@net2'],
    });
  });

  it('removes what is no longer asked for, and the others keep their names (b stays net2, though a fresh plan calls it net1)', () => {
    assert.deepEqual(names(plan(pod, [want('default/b', 'net1')])), {
      add: [],
      remove: ['default/a@net1'],
      keep: ['default/podnet@eth0', 'default/b@net2'],
    });
  });

  it('adds a new network under the next free name, never one in use (not even one being removed)', () => {
    assert.deepEqual(names(plan(pod, [want('default/b', 'net1'), want('default/c', 'net2')])), {
      add: ['default/c@net3'],
      remove: ['default/a@net1'],
      keep: ['default/podnet@eth0', 'default/b@net2'],
    });
    const prefixed = plan(pod, [want('default/a', 'net1'), want('default/b', 'net2'), want('default/s', 'sriov1')]);
    assert.deepEqual(names(prefixed).add, ['default/s@sriov1'], "a NAD's interface prefix is kept");
  });

  it('adds a network a second time as a second interface, and honours an explicit name', () => {
    assert.deepEqual(
      names(
        plan(pod, [
          want('default/a', 'net1'),
          want('default/b', 'net2'),
          want('default/a', 'net3'),
          want('default/c', 'blue0', true),
        ]),
      ).add,
      ['default/a@net3', 'default/c@blue0'],
    );
  });

  it('matches an explicit name only to the same network under that name', () => {
    assert.deepEqual(names(plan(pod, [want('default/a', 'net9', true), want('default/b', 'net2')])), {
      add: ['default/a@net9'],
      remove: ['default/a@net1'],
      keep: ['default/podnet@eth0', 'default/b@net2'],
    });
  });

  it('refuses an explicit name another network still uses, and default-route on an added network', () => {
    const taken = plan(pod, [want('default/c', 'net1', true)]);
    assert.ok(
      !taken.ok && /interface "net1" is still used by network default\/a on the running pod/.test(taken.error.message),
      taken.ok ? '' : taken.error.message,
    );
    const routed = plan(pod, [
      want('default/a', 'net1'),
      want('default/b', 'net2'),
      want('default/c', 'net3', false, true),
    ]);
    assert.ok(
      !routed.ok && /"default-route" cannot be set on a network added to a running pod/.test(routed.error.message),
    );
  });

  it('never removes the default network', () => {
    assert.deepEqual(names(plan(pod, [])), {
      add: [],
      remove: ['default/a@net1', 'default/b@net2'],
      keep: ['default/podnet@eth0'],
    });
  });
});

describe('a change of a pod with the auxiliary chain', () => {
  it("keeps the chain: it is the node's, not the annotation's", () => {
    const chain: CurrentAttachment = { network: 'auxiliary:vendor-cni-chain', ifname: 'net2', isDefault: false };
    const r = plan([has('eth', 'eth0', true), has('a', 'net1'), chain], []);
    assert.ok(r.ok);
    assert.deepEqual(
      r.value.keep.map((a) => a.network),
      ['default/eth', 'auxiliary:vendor-cni-chain'],
    );
    assert.deepEqual(
      r.value.remove.map((a) => a.network),
      ['default/a'],
    );
  });
});
