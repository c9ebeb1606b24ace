/**
 * How a pod's DRA-claimed devices enter its plan (src/engine/claims/networks.ts), without a kernel: a claim naming a
 * network adds it after the annotation's selections, or becomes the device of the annotation's selection of that
 * network; a claim naming none gives its device to a network whose NAD names its resource; the outcomes reported to
 * the claims carry the interface, its addresses with prefix and its MAC.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { claimedOutcomes, withClaimedNetworkDevices, withClaimedSelections } from '../../src/engine/claims/networks';
import type { ClaimedNetworkDevice } from '../../src/engine/claims/ports';
import type { NetworkAttachment } from '../../src/engine/journal';
import type { AttachmentStep } from '../../src/engine/plan';
import type { NetworkSelection } from '../../src/networks/selection';

const device = (name: string, extra: Partial<ClaimedNetworkDevice> = {}): ClaimedNetworkDevice => ({
  claim: { namespace: 'ns', name: `c-${name}`, uid: `u-${name}` },
  request: 'nic',
  pool: 'n1/plexus.io/nic',
  device: name,
  resourceName: 'plexus.io/nic',
  kind: 'host-device',
  deviceID: name,
  ...extra,
});
const sel = (name: string, index: number, extra: Partial<NetworkSelection> = {}): NetworkSelection => ({
  namespace: 'ns',
  name,
  index,
  ...extra,
});
const step = (ifname: string, selection?: NetworkSelection, annotations: Record<string, string> = {}): AttachmentStep =>
  ({
    planned: {
      ifname,
      network: { key: `ns/${selection?.name ?? 'x'}`, annotations },
      ...(selection ? { selection } : {}),
    },
    request: { options: {} },
  }) as unknown as AttachmentStep;

describe("claimed devices in a pod's plan", () => {
  it('a claim naming a network the annotation does not select adds it after the selections, with its name, ips, mac', () => {
    const d = device('eth3', {
      network: { namespace: 'ns', name: 'fast' },
      interfaceName: 'net9',
      ips: ['10.1.0.5/24'],
      mac: '02:00:00:00:00:05',
    });
    const { selections, deviceOf } = withClaimedSelections([sel('blue', 0)], [d]);
    assert.deepEqual(selections, [
      sel('blue', 0),
      { namespace: 'ns', name: 'fast', interface: 'net9', ips: ['10.1.0.5/24'], mac: '02:00:00:00:00:05', index: 1 },
    ]);
    assert.equal(deviceOf.get(selections[1]!), d);
  });
  it("a claim naming a network the annotation selects is that selection's device; the annotation's fields win", () => {
    const d = device('eth3', {
      network: { namespace: 'ns', name: 'fast' },
      interfaceName: 'net9',
      ips: ['10.1.0.5/24'],
    });
    const { selections, deviceOf } = withClaimedSelections([sel('fast', 0, { interface: 'fast0' })], [d]);
    assert.deepEqual(selections, [
      { namespace: 'ns', name: 'fast', interface: 'fast0', ips: ['10.1.0.5/24'], index: 0 },
    ]);
    assert.equal(deviceOf.get(selections[0]!), d);
  });
  it("two claims naming one network: the annotation's one selection takes the first, the second adds another", () => {
    const a = device('eth3', { network: { namespace: 'ns', name: 'fast' } });
    const b = device('eth4', { network: { namespace: 'ns', name: 'fast' } });
    const { selections, deviceOf } = withClaimedSelections([sel('fast', 0)], [a, b]);
    assert.equal(selections.length, 2);
    assert.deepEqual([deviceOf.get(selections[0]!), deviceOf.get(selections[1]!)], [a, b]);
  });
  it('steps get the claimed device as deviceID; a claim naming no network goes to the NAD naming its resource', () => {
    const named = device('eth3', { network: { namespace: 'ns', name: 'fast' } });
    const unnamed = device('eth4');
    const fast = sel('fast', 0);
    const steps = withClaimedNetworkDevices(
      [
        step('eth0'),
        step('net1', fast),
        step('net2', sel('byres', 1), { 'k8s.v1.cni.cncf.io/resourceName': 'plexus.io/nic' }),
      ],
      [named, unnamed],
      new Map([[fast, named]]),
    );
    assert.deepEqual(
      steps.map((s) => s.request.options?.deviceID),
      [undefined, 'eth3', 'eth4'],
    );
    assert.deepEqual(steps[1]!.request.options?.kubeletDevice, { resourceName: 'plexus.io/nic', deviceID: 'eth3' });
    assert.deepEqual(
      steps.map((s) => s.claimed),
      [undefined, named, unnamed],
    );
  });
  it('outcomes: the interface, its addresses with prefix and its MAC; a device no network took says so', () => {
    const a = device('eth3', { network: { namespace: 'ns', name: 'fast' } });
    const idle = device('eth4');
    const attachments = [
      {
        network: 'ns/fast',
        ifname: 'net1',
        driver: 'host-device',
        isDefault: false,
        kubeletDevice: { resourceName: 'plexus.io/nic', deviceID: 'eth3' },
        result: {
          cniVersion: '1.0.0',
          interfaces: [{ name: 'net1', mac: '02:00:00:00:00:05', sandbox: '/var/run/netns/x' }],
          ips: [{ address: '10.1.0.5/24', interface: 0 }],
          routes: [],
          dns: {},
        },
      },
    ] as unknown as NetworkAttachment[];
    const outcomes = claimedOutcomes([a, idle], attachments);
    assert.deepEqual(outcomes[0], {
      device: a,
      attached: { interfaceName: 'net1', ips: ['10.1.0.5/24'], mac: '02:00:00:00:00:05' },
    });
    assert.match(outcomes[1]!.error ?? '', /^no network of the pod took this device/);
  });
});
