/**
 * A ResourceClaim two pods share (both name it in spec.resourceClaims): its network device can be in one network
 * namespace only. The pod whose ADD comes second is refused before anything is made, with the pod that has the device
 * named, and the claim's status is left as the first pod made it.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { parseCniRequest } from '../../src/cni/request';
import type { AttachmentEngine } from '../../src/engine/engine';
import { ok, type CniError } from '../../src/cni/errors';
import type {
  ClaimedDeviceOutcome,
  ClaimedDevices,
  ClaimedNetworkDevice,
  PodClaims,
} from '../../src/engine/claims/ports';
import { engineBed, forwardedCall, type EngineBed } from '../support/engine-bed';

/** The device of claim default/shared, for network default/blue, prepared for both pods. */
const shared: ClaimedNetworkDevice = {
  claim: { namespace: 'default', name: 'shared', uid: 'claim-uid' },
  request: 'nic',
  pool: 'n1/plexus.io/nic',
  device: 'eth3',
  resourceName: 'plexus.io/nic',
  kind: 'host-device',
  deviceID: 'eth3',
  network: { namespace: 'default', name: 'blue' },
  interfaceName: 'net1',
};

/** An ADD of pod `name` (UID uid-<name>) that selects no network by annotation: its claim gives it blue. */
const addOf = (name: string, netns: string): Parameters<AttachmentEngine['add']>[0] => {
  const call = forwardedCall('ADD', name, netns, '');
  call.env.CNI_ARGS = `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${name};K8S_POD_UID=uid-${name}`;
  const parsed = parseCniRequest(call);
  if (!parsed.ok) throw parsed.error;
  return parsed.value as Parameters<AttachmentEngine['add']>[0];
};

/** The claim's record as DRA keeps it: reserved for `pods` (UIDs) when it was prepared, found by name too. */
class PreparedClaims implements ClaimedDevices {
  constructor(private readonly pods: readonly string[]) {}
  forPod(podUid: string, named?: PodClaims): readonly ClaimedNetworkDevice[] {
    const byName = named?.namespace === 'default' && named.claims.includes('shared');
    return this.pods.includes(podUid) || byName ? [shared] : [];
  }
}

let bed: EngineBed;
beforeEach(async () => {
  bed = await engineBed();
});
afterEach(() => bed.remove());

describe('a claim shared by two pods', () => {
  it("the second pod's ADD fails naming the pod that has the device; nothing of it is made, the claim's status kept", async () => {
    const failed: string[] = [];
    const settled: { pod: string | undefined; outcomes: readonly ClaimedDeviceOutcome[] }[] = [];
    const engine = bed.engineWith({
      ports: {
        claims: { forPod: (uid) => (uid === 'uid-first' || uid === 'uid-second' ? [shared] : []) },
        claimSink: { settled: (pod, outcomes) => settled.push({ pod: pod.name, outcomes }), released: () => undefined },
        statusSink: {
          attached: () => undefined,
          detached: () => undefined,
          failed: (pod, _cid, e: CniError) => failed.push(`${pod.name}: ${e.message}`),
        },
      },
    });
    const first = await engine.add(addOf('first', bed.pod('first')));
    assert.ok(first.ok, !first.ok ? first.error.message : '');
    const leases = await bed.leases();
    const secondNetns = bed.pod('second');
    const second = await engine.add(addOf('second', secondNetns));
    assert.ok(!second.ok, 'refused');
    assert.equal(second.error.code, 4);
    assert.equal(
      second.error.message,
      'device eth3 of ResourceClaim default/shared is already in pod default/first (network default/blue): a network device can be in one pod only',
    );
    assert.match(second.error.details, /give each pod its own claim \(a ResourceClaimTemplate\)/);
    assert.deepEqual(failed, [`second: ${second.error.message}`], 'the pod gets the error as its event');
    assert.equal(await bed.journal.load('second', 'eth0'), undefined, 'no record');
    assert.deepEqual(await bed.leases(), leases, 'no address taken');
    assert.deepEqual(bed.kernel.links(secondNetns), [], 'no interface made');
    assert.deepEqual(
      settled.map((s) => s.pod),
      ['first'],
      "the claim's status is reported for the first pod only",
    );
  });
  it('a pod the claim was reserved for after its Prepare finds it by name (PodInfo.claims), and is refused the same way', async () => {
    const prepared = new PreparedClaims(['uid-first']);
    const pods = {
      get: (_ns: string, name: string) =>
        Promise.resolve(ok({ uid: `uid-${name}`, annotations: {}, claims: ['shared'] })),
    };
    const engine = bed.engineWith({ ports: { claims: prepared, pods } });
    assert.ok((await engine.add(addOf('first', bed.pod('first')))).ok);
    const second = await engine.add(addOf('second', bed.pod('second')));
    assert.ok(!second.ok, 'refused, not attached without its claimed network');
    assert.match(
      second.error.message,
      /^device eth3 of ResourceClaim default\/shared is already in pod default\/first/,
    );
  });
  it('a retried ADD of the pod that has the device is not refused', async () => {
    const engine = bed.engineWith({ ports: { claims: { forPod: () => [shared] } } });
    const netns = bed.pod('first');
    assert.ok((await engine.add(addOf('first', netns))).ok);
    const again = await engine.add(addOf('first', netns));
    assert.ok(again.ok, !again.ok ? again.error.message : '');
  });
});

describe('a claimed device the node does not offer (its record does not fit the resources file)', () => {
  const unoffered: ClaimedNetworkDevice = {
    ...shared,
    notOffered: 'pool n1/plexus.io/nic has no device eth3 in the resources file',
  };
  it("a running pod's change does not add the network of such a device, and leaves the pod as it was", async () => {
    let devices: ClaimedNetworkDevice[] = [];
    const engine = bed.engineWith({ ports: { claims: { forPod: () => devices } } });
    const netns = bed.pod('running');
    assert.ok((await engine.add(addOf('running', netns))).ok);
    devices = [unoffered];
    const changed = await engine.changeNetworks('running', 'eth0', {});
    assert.ok(!changed.ok, 'refused');
    assert.equal(
      changed.error.message,
      'device eth3 of ResourceClaim default/shared (claim-uid) is not one this node offers: its prepared record is not acted on',
    );
    assert.match(
      changed.error.details,
      /^pool n1\/plexus\.io\/nic has no device eth3 in the resources file; put the device back/,
    );
    assert.deepEqual(bed.kernel.links(netns), ['eth0'], 'no interface added');
  });
});
