/**
 * Device IDs from other DRA drivers' claims, without an API server: which claims a pod holds, the slices' device
 * attributes (the newest generation of a pool), the resolution into device IDs per k8s.cni.cncf.io/resourceName
 * (devices without the attributes skipped, plexus.io's own left to the engine), its refusals, the reader's reads
 * through its port, and the merge with the kubelet's device-plugin devices in the engine's DeviceSource shape.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CniCode, CniError, err, ok, type Result } from '../../src/cni/errors';
import type { DeviceSource } from '../../src/engine/kubelet-devices';
import {
  claimNamesOf,
  ClaimDeviceReader,
  resolveClaimDevices,
  SliceIndex,
  withClaimedDevices,
  type ClaimsPort,
} from '../../src/dra/consumer';
import type { AllocatedClaim, ClaimingPod, PublishedSlice } from '../../src/dra/consumer/shapes';

const DRIVER = 'nic.test.example';
const RESOURCE = 'example.com/fastnic';
const POD_UID = 'pod-uid-1';

const attrs = (deviceID?: string, resourceName?: string): Record<string, { string: string }> => ({
  ...(deviceID ? { 'k8s.cni.cncf.io/deviceID': { string: deviceID } } : {}),
  ...(resourceName ? { 'k8s.cni.cncf.io/resourceName': { string: resourceName } } : {}),
});
const slice = (
  pool: string,
  generation: number,
  devices: PublishedSlice['spec']['devices'],
  driver = DRIVER,
): PublishedSlice => ({ spec: { driver, pool: { name: pool, generation }, devices } });
const result = (
  device: string,
  pool = 'node1',
  driver = DRIVER,
): { request: string; driver: string; pool: string; device: string } => ({ request: 'nic', driver, pool, device });
const claim = (
  name: string,
  results: ReturnType<typeof result>[] | undefined,
  reservedFor = [{ resource: 'pods', name: 'p', uid: POD_UID }],
): AllocatedClaim => ({
  metadata: { name, namespace: 'default', uid: `uid-${name}` },
  status: { ...(results ? { allocation: { devices: { results } } } : {}), reservedFor },
});
type PodClaimRefs = NonNullable<NonNullable<ClaimingPod['spec']>['resourceClaims']>;
const pod = (claims: PodClaimRefs, statuses?: { name: string; resourceClaimName?: string | null }[]): ClaimingPod => ({
  metadata: { name: 'p', namespace: 'default', uid: POD_UID },
  spec: { nodeName: 'node1', resourceClaims: claims },
  ...(statuses ? { status: { resourceClaimStatuses: statuses } } : {}),
});
const podRef = { key: 'default/p', uid: POD_UID };
const none = new Set<string>();

describe('the claims a pod holds', () => {
  it("a claim named in the spec is read by that name; a template's by the name in the pod's status", () => {
    const names = claimNamesOf(
      pod(
        [
          { name: 'a', resourceClaimName: 'shared' },
          { name: 'b', resourceClaimTemplateName: 't' },
        ],
        [{ name: 'b', resourceClaimName: 'p-b-x7' }],
      ),
    );
    assert.deepEqual(names, ok(['shared', 'p-b-x7']));
  });

  it('a template claim the controller decided it did not need (a status entry without a name) is no claim', () => {
    assert.deepEqual(
      claimNamesOf(pod([{ name: 'b', resourceClaimTemplateName: 't' }], [{ name: 'b', resourceClaimName: null }])),
      ok([]),
    );
  });

  it('a template claim not in the status yet is "try again later" (11) naming the pod\'s claim', () => {
    const names = claimNamesOf(pod([{ name: 'b', resourceClaimTemplateName: 't' }]));
    assert.ok(!names.ok);
    assert.equal(names.error.code, CniCode.TryAgainLater);
    assert.match(
      names.error.message,
      /pod default\/p: the ResourceClaim of its claim b \(from a template\) is not in the pod's status yet/,
    );
  });
});

describe('device attributes from the slices', () => {
  it('only the newest generation of a pool counts (an older slice left over from a republish is ignored)', () => {
    const index = new SliceIndex([
      slice('node1', 1, [{ name: 'd0', attributes: attrs('old0', RESOURCE) }]),
      slice('node1', 2, [{ name: 'd0', attributes: attrs('new0', RESOURCE) }]),
    ]);
    assert.deepEqual(index.find(DRIVER, 'node1', 'd0'), { deviceID: 'new0', resourceName: RESOURCE });
  });

  it("a device is found by driver, pool and name, never by another driver's pool of the same name", () => {
    const index = new SliceIndex([
      slice('node1', 1, [{ name: 'd0', attributes: attrs('x', RESOURCE) }], 'other.example'),
    ]);
    assert.equal(index.find(DRIVER, 'node1', 'd0'), undefined);
  });
});

describe("resolving a pod's claims into device IDs per resource name", () => {
  const index = new SliceIndex([
    slice('node1', 3, [
      { name: 'vf3', attributes: attrs('0000:3b:02.3', RESOURCE) },
      { name: 'vf10', attributes: attrs('0000:3b:02.10', RESOURCE) },
      { name: 'gpu0', attributes: { 'gpu.example/model': { string: 'x' } } },
      { name: 'noname', attributes: attrs('eth9') },
    ]),
  ]);

  it('each allocated device with both attributes gives its deviceID to its resourceName, in natural order', () => {
    const got = resolveClaimDevices(podRef, [claim('c1', [result('vf10'), result('vf3')])], index, none);
    assert.ok(got.ok);
    assert.deepEqual([...got.value.devices], [[RESOURCE, ['0000:3b:02.3', '0000:3b:02.10']]]);
    assert.deepEqual(got.value.skipped, []);
  });

  it('devices without the attributes (a GPU), without a resourceName, or in no slice are skipped with the reason', () => {
    const got = resolveClaimDevices(
      podRef,
      [claim('c1', [result('vf3'), result('gpu0'), result('noname'), result('gone')])],
      index,
      none,
    );
    assert.ok(got.ok);
    assert.deepEqual([...got.value.devices], [[RESOURCE, ['0000:3b:02.3']]]);
    assert.deepEqual(got.value.skipped, [
      `default/c1: device gpu0 of pool node1 (driver ${DRIVER}) has no k8s.cni.cncf.io/deviceID attribute`,
      `default/c1: device noname of pool node1 (driver ${DRIVER}) has no k8s.cni.cncf.io/resourceName attribute`,
      `default/c1: device gone of pool node1 (driver ${DRIVER}) is in none of the driver's ResourceSlices of this node`,
    ]);
  });

  it('devices of a skipped driver (plexus.io: the engine has them from Prepare) are not looked up at all', () => {
    const got = resolveClaimDevices(
      podRef,
      [claim('c1', [result('vf3'), result('nic0', 'n/r', 'plexus.io')])],
      index,
      new Set(['plexus.io']),
    );
    assert.ok(got.ok);
    assert.deepEqual(got.value.skipped, []);
    assert.deepEqual([...got.value.devices], [[RESOURCE, ['0000:3b:02.3']]]);
  });

  it('a claim without an allocation is "try again later" (11)', () => {
    const got = resolveClaimDevices(podRef, [claim('c1', undefined)], index, none);
    assert.ok(!got.ok);
    assert.equal(got.error.code, CniCode.TryAgainLater);
    assert.match(got.error.message, /ResourceClaim default\/c1 has no device allocation/);
  });

  it('a claim not reserved for the pod gives it nothing: an error (4) naming the claim and the pod', () => {
    const got = resolveClaimDevices(
      podRef,
      [claim('c1', [result('vf3')], [{ resource: 'pods', name: 'other', uid: 'other-uid' }])],
      index,
      none,
    );
    assert.ok(!got.ok);
    assert.equal(got.error.code, CniCode.InvalidEnvironment);
    assert.match(got.error.message, /ResourceClaim default\/c1 is not reserved for pod default\/p/);
  });
});

/** A port over fixed objects that counts what it was asked. */
class FakePort implements ClaimsPort {
  readonly asked: string[] = [];
  constructor(
    private readonly pods: Record<string, ClaimingPod>,
    private readonly claims: Record<string, AllocatedClaim>,
    private readonly published: PublishedSlice[],
    private readonly failing = '',
  ) {}

  pod(namespace: string, name: string): Promise<Result<ClaimingPod | undefined, string>> {
    this.asked.push(`pod ${namespace}/${name}`);
    return Promise.resolve(ok(this.pods[`${namespace}/${name}`]));
  }

  claim(namespace: string, name: string): Promise<Result<AllocatedClaim | undefined, string>> {
    this.asked.push(`claim ${namespace}/${name}`);
    if (this.failing === 'claim') return Promise.resolve(err('reading ResourceClaim default/c1: 403 forbidden'));
    return Promise.resolve(ok(this.claims[`${namespace}/${name}`]));
  }

  slices(driver: string, nodeName: string | undefined): Promise<Result<PublishedSlice[], string>> {
    this.asked.push(`slices ${driver} on ${nodeName}`);
    return Promise.resolve(ok(this.published.filter((s) => s.spec.driver === driver)));
  }
}

describe('the claim reader', () => {
  const slices = [slice('node1', 1, [{ name: 'vf3', attributes: attrs('0000:3b:02.3', RESOURCE) }])];

  it('a pod without claims costs one read of the pod and gives no devices', async () => {
    const port = new FakePort({ 'default/p': pod([]) }, {}, slices);
    assert.deepEqual(await new ClaimDeviceReader(port).devicesOf('default', 'p'), ok(new Map()));
    assert.deepEqual(port.asked, ['pod default/p']);
  });

  it("reads each claim, then each driver's slices of the pod's node once, skipping plexus.io", async () => {
    const port = new FakePort(
      {
        'default/p': pod([
          { name: 'a', resourceClaimName: 'c1' },
          { name: 'b', resourceClaimName: 'c2' },
        ]),
      },
      { 'default/c1': claim('c1', [result('vf3')]), 'default/c2': claim('c2', [result('nic0', 'n/r', 'plexus.io')]) },
      slices,
    );
    const got = await new ClaimDeviceReader(port).devicesOf('default', 'p');
    assert.deepEqual(got, ok(new Map([[RESOURCE, ['0000:3b:02.3']]])));
    assert.deepEqual(port.asked, [
      'pod default/p',
      'claim default/c1',
      'claim default/c2',
      `slices ${DRIVER} on node1`,
    ]);
  });

  it('a claim the API does not have, a pod it does not have, a refused read: each "try again later" (11) saying which', async () => {
    const holder = pod([{ name: 'a', resourceClaimName: 'c1' }]);
    const missing = await new ClaimDeviceReader(new FakePort({ 'default/p': holder }, {}, slices)).devicesOf(
      'default',
      'p',
    );
    assert.ok(!missing.ok);
    assert.equal(missing.error.code, CniCode.TryAgainLater);
    assert.match(missing.error.message, /ResourceClaim default\/c1 of the pod does not exist/);
    const noPod = await new ClaimDeviceReader(new FakePort({}, {}, slices)).devicesOf('default', 'p');
    assert.ok(!noPod.ok);
    assert.match(noPod.error.message, /pod default\/p is not in the API/);
    const refused = await new ClaimDeviceReader(new FakePort({ 'default/p': holder }, {}, slices, 'claim')).devicesOf(
      'default',
      'p',
    );
    assert.ok(!refused.ok);
    assert.equal(refused.error.code, CniCode.TryAgainLater);
    assert.match(refused.error.message, /403 forbidden/);
    assert.match(refused.error.details, /deploy\/10-rbac\.yaml/);
  });
});

describe("the kubelet's devices and the claims' devices as one source", () => {
  const fixed = (answer: Result<ReadonlyMap<string, readonly string[]>>): DeviceSource => ({
    devicesOf: () => Promise.resolve(answer),
  });

  it("is a DeviceSource of the engine; per resource name the kubelet's devices come first", async () => {
    const kubelet = fixed(
      ok(
        new Map([
          [RESOURCE, ['0000:3b:02.1']],
          ['plexus.io/memif', ['memif0']],
        ]),
      ),
    );
    const claims = fixed(
      ok(
        new Map([
          [RESOURCE, ['0000:3b:02.3']],
          ['example.com/other', ['eth7']],
        ]),
      ),
    );
    const source: DeviceSource = withClaimedDevices(kubelet, claims);
    assert.deepEqual(
      await source.devicesOf('default', 'p'),
      ok(
        new Map([
          [RESOURCE, ['0000:3b:02.1', '0000:3b:02.3']],
          ['plexus.io/memif', ['memif0']],
          ['example.com/other', ['eth7']],
        ]),
      ),
    );
  });

  it('either side failing fails the answer with its error (a device left out would go to the wrong network)', async () => {
    const failure = new CniError(CniCode.TryAgainLater, 'claims unreadable');
    const got = await withClaimedDevices(fixed(ok(new Map())), fixed(err(failure))).devicesOf('default', 'p');
    assert.deepEqual(got, err(failure));
  });
});
