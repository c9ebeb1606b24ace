/**
 * The DRA driver without a kubelet: the protos' wire format (field numbers checked against hand-encoded bytes), device
 * names and sysfs facts (on a sysfs tree the test makes), the opaque claim config, the prepared-claim records across a
 * restart, the preparer's refusals, the ResourceSlice a pool becomes, and the gRPC sockets answering as the kubelet
 * calls them (Registration.GetInfo, DRAPlugin v1 and v1beta1).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, watch, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import pino from 'pino';
import { offers, parseResources } from '../../src/deviceplugin/config';
import {
  loadDraServices,
  SUPPORTED_SERVICES,
  type NodePrepareResourcesResponse,
  type PluginInfo,
} from '../../src/dra/api';
import { configForRequest, parseClaimConfig } from '../../src/dra/claim-config';
import { ApiClaimReader, type ClaimReader, type ResourceClaim } from '../../src/dra/claims-api';
import type { KubeApiClient } from '../../src/k8s/api-client';
import { ATTRIBUTES, deviceName, DraInventory } from '../../src/dra/devices';
import { DraDriver } from '../../src/dra';
import { DraPluginServer } from '../../src/dra/plugin-server';
import { ClaimPreparer } from '../../src/dra/prepare';
import { PreparedClaims } from '../../src/dra/prepared-claims';
import { sliceFor, sliceName } from '../../src/dra/slices';
import type { PodPresence } from '../../src/dra/stale-claims';
import { CniCode, CniError, err, ok } from '../../src/cni/errors';
import type { NetworkDefinition } from '../../src/networks/nad';
import type { NetworkReader } from '../../src/networks/source';
import { hostDeviceFacts } from '../../src/dra/sysfs';
import { unary } from '../../src/kubelet/grpc';
import { untilTrue } from '../support/until';

const root = mkdtempSync(join(tmpdir(), 'plexus-dra-unit-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const freshDir = (): string => mkdtempSync(join(root, `d${n++}-`));
const silent = pino({ level: 'silent' });

const lengthPrefix = (len: number): Buffer => {
  const out: number[] = [];
  for (; len >= 0x80; len >>>= 7) out.push((len & 0x7f) | 0x80);
  out.push(len);
  return Buffer.from(out);
};
const ld = (field: number, payload: Buffer | string): Buffer => {
  const b = Buffer.isBuffer(payload) ? payload : Buffer.from(payload);
  return Buffer.concat([Buffer.from([(field << 3) | 2]), lengthPrefix(b.length), b]);
};

/** A sysfs tree: a PCI NIC (0000:3b:00.1 on root pci0000:3a, NUMA 1, netdev ens1f1) and a veth (no device link). */
function fakeSysfs(): string {
  const sys = freshDir();
  const pciDir = join(sys, 'devices', 'pci0000:3a', '0000:3a:00.0', '0000:3b:00.1');
  mkdirSync(join(pciDir, 'net', 'ens1f1'), { recursive: true });
  writeFileSync(join(pciDir, 'numa_node'), '1\n');
  mkdirSync(join(sys, 'bus', 'pci', 'devices'), { recursive: true });
  symlinkSync(join(sys, 'bus', 'pci'), join(pciDir, 'subsystem'));
  symlinkSync(pciDir, join(sys, 'bus', 'pci', 'devices', '0000:3b:00.1'));
  mkdirSync(join(sys, 'class', 'net'), { recursive: true });
  const ens = join(sys, 'devices', 'virtual-ens');
  mkdirSync(ens, { recursive: true });
  symlinkSync(pciDir, join(ens, 'device'));
  symlinkSync(ens, join(sys, 'class', 'net', 'ens1f1'));
  mkdirSync(join(sys, 'devices', 'virtual', 'net', 'veth7'), { recursive: true });
  symlinkSync(join(sys, 'devices', 'virtual', 'net', 'veth7'), join(sys, 'class', 'net', 'veth7'));
  return sys;
}

describe('the DRA protos on the wire', () => {
  const services = loadDraServices();
  it('NodePrepareResourcesRequest: claims = 1, Claim namespace = 1, uid = 2, name = 3 (v1 and v1beta1 alike)', () => {
    const bytes = ld(1, Buffer.concat([ld(1, 'ns'), ld(2, 'u-1'), ld(3, 'c')]));
    for (const v of ['v1', 'v1beta1'] as const) {
      const decoded: unknown = services.draPlugin[v].NodePrepareResources!.requestDeserialize(bytes);
      assert.deepEqual(decoded, { claims: [{ namespace: 'ns', uid: 'u-1', name: 'c' }] });
    }
  });
  it('NodePrepareResourcesResponse: a map by claim UID of {devices = 1, error = 2}, Device pool = 2, name = 3', () => {
    const encode = services.draPlugin.v1.NodePrepareResources!.responseSerialize;
    const bytes = encode({
      claims: {
        u1: { devices: [{ request_names: ['r'], pool_name: 'p', device_name: 'd', cdi_device_ids: [] }], error: '' },
      },
    });
    const device = Buffer.concat([ld(1, 'r'), ld(2, 'p'), ld(3, 'd')]);
    // grpc-js's encoder writes the value's empty error string too (field 2, length 0): the same on the wire for Go.
    assert.deepEqual(bytes, ld(1, Buffer.concat([ld(1, 'u1'), ld(2, Buffer.concat([ld(1, device), ld(2, '')]))])));
  });
  it('PluginInfo: type = 1, name = 2, endpoint = 3, supported_versions = 4', () => {
    const bytes = services.registration.GetInfo!.responseSerialize({
      type: 'DRAPlugin',
      name: 'plexus.io',
      endpoint: '/s',
      supported_versions: ['v1.DRAPlugin'],
    });
    assert.deepEqual(
      bytes,
      Buffer.concat([ld(1, 'DRAPlugin'), ld(2, 'plexus.io'), ld(3, '/s'), ld(4, 'v1.DRAPlugin')]),
    );
  });
  it("the gRPC paths are the kubelet's", () => {
    assert.equal(
      services.draPlugin.v1.NodePrepareResources!.path,
      '/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources',
    );
    assert.equal(
      services.draPlugin.v1beta1.NodeUnprepareResources!.path,
      '/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources',
    );
    assert.equal(
      services.registration.NotifyRegistrationStatus!.path,
      '/pluginregistration.Registration/NotifyRegistrationStatus',
    );
  });
});

describe('devices and their attributes', () => {
  it('device names are DNS labels; a PCI address becomes pci-<address>, anything renamed gets a hash', () => {
    assert.equal(deviceName('eth3'), 'eth3');
    assert.match(deviceName('0000:3B:00.1'), /^pci-0000-3b-00-1-[0-9a-f]{6}$/);
    assert.notEqual(deviceName('eth.1'), deviceName('eth_1'));
    for (const name of [deviceName('0000:3b:00.1'), deviceName('Eth_1'), deviceName('x'.repeat(15))])
      assert.match(name, /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/);
  });
  it('sysfs gives a PCI NIC its address, PCIe root, NUMA node and interface name, by name or by address', () => {
    const sys = fakeSysfs();
    const want = {
      present: true,
      interfaceName: 'ens1f1',
      pciAddress: '0000:3b:00.1',
      pcieRoot: 'pci0000:3a',
      numaNode: 1,
    };
    assert.deepEqual(hostDeviceFacts('ens1f1', sys), want);
    assert.deepEqual(hostDeviceFacts('0000:3b:00.1', sys), want);
    assert.deepEqual(hostDeviceFacts('veth7', sys), { present: true, interfaceName: 'veth7' });
    assert.deepEqual(hostDeviceFacts('gone0', sys), { present: false, interfaceName: 'gone0' });
  });
  it('the inventory publishes present devices and held ones, with the Multus attributes', () => {
    const sys = fakeSysfs();
    const parsed = parseResources({
      resources: [
        { name: 'plexus.io/nic', kind: 'host-device', devices: ['ens1f1', 'gone0'], offer: ['dra'] },
        { name: 'plexus.io/memif', kind: 'memif', count: 2, offer: ['device-plugin', 'dra'] },
        { name: 'plexus.io/dp-only', kind: 'memif', count: 1 },
      ],
    });
    assert.ok(parsed.ok);
    const inventory = new DraInventory(parsed.value, { nodeName: 'n1', sysfsRoot: sys });
    const [nic, memif] = inventory.pools();
    assert.equal(inventory.pools().length, 2, 'the device-plugin-only resource is not a DRA pool');
    assert.equal(nic!.name, 'n1/plexus.io/nic');
    assert.deepEqual(
      nic!.devices.map((d) => d.name),
      ['ens1f1'],
    );
    assert.deepEqual(nic!.devices[0]!.attributes, {
      [ATTRIBUTES.kind]: { string: 'host-device' },
      [ATTRIBUTES.resourceName]: { string: 'plexus.io/nic' },
      [ATTRIBUTES.deviceID]: { string: 'ens1f1' },
      [ATTRIBUTES.interfaceName]: { string: 'ens1f1' },
      [ATTRIBUTES.pciAddress]: { string: '0000:3b:00.1' },
      [ATTRIBUTES.pcieRoot]: { string: 'pci0000:3a' },
      [ATTRIBUTES.numaNode]: { int: 1 },
    });
    assert.deepEqual(
      inventory.pools((_p, d) => d === 'gone0')[0]!.devices.map((d) => d.name),
      ['ens1f1', 'gone0'],
      'held by a claim: still published',
    );
    assert.deepEqual(
      memif!.devices.map((d) => [d.name, d.attributes[ATTRIBUTES.deviceID]]),
      [
        ['memif0', { string: 'memif0' }],
        ['memif1', { string: 'memif1' }],
      ],
    );
  });
  it('a pool becomes one ResourceSlice of driver plexus.io for the node, named per node and pool', () => {
    const inventory = new DraInventory(
      parseResourcesOk([{ name: 'plexus.io/memif', kind: 'memif', count: 1, offer: ['dra'] }]),
      { nodeName: 'n1' },
    );
    const slice = sliceFor('n1', inventory.pools()[0]!, 3);
    assert.deepEqual(slice.spec, {
      driver: 'plexus.io',
      nodeName: 'n1',
      pool: { name: 'n1/plexus.io/memif', generation: 3, resourceSliceCount: 1 },
      devices: [
        {
          name: 'memif0',
          attributes: {
            'plexus.io/kind': { string: 'memif' },
            'k8s.cni.cncf.io/resourceName': { string: 'plexus.io/memif' },
            'k8s.cni.cncf.io/deviceID': { string: 'memif0' },
          },
        },
      ],
    });
    assert.match(slice.metadata.name, /^plexus-n1-memif-[0-9a-f]{8}$/);
    assert.notEqual(sliceName('n1', 'n1/a/x'), sliceName('n1', 'n1/b/x'));
  });
});

function parseResourcesOk(
  resources: unknown[],
): ReturnType<typeof parseResources> extends { ok: true; value: infer V } ? V : never {
  const r = parseResources({ resources });
  if (!r.ok) throw r.error;
  return r.value as never;
}

describe("the resources file's offer", () => {
  it('defaults to device-plugin, takes dra or both, and refuses anything else with the field named', () => {
    const r = parseResources({ resources: [{ name: 'plexus.io/m', kind: 'memif', count: 1 }] });
    assert.ok(r.ok);
    assert.equal(r.value[0]!.offer, undefined);
    assert.ok(offers(r.value[0]!, 'device-plugin') && !offers(r.value[0]!, 'dra'));
    const bad = parseResources({ resources: [{ name: 'plexus.io/m', kind: 'memif', count: 1, offer: ['cdi'] }] });
    assert.ok(!bad.ok);
    assert.match(bad.error.message, /resources\.0\.offer\.0/);
    const empty = parseResources({ resources: [{ name: 'plexus.io/m', kind: 'memif', count: 1, offer: [] }] });
    assert.ok(!empty.ok);
    assert.match(empty.error.message, /at least one of device-plugin, dra/);
  });
});

describe('opaque claim config', () => {
  it("takes a NAD reference (the claim's namespace when it names none), an interface name, ips and a MAC", () => {
    assert.deepEqual(parseClaimConfig({ network: 'fast' }, 'ns1'), {
      ok: true,
      value: { network: { namespace: 'ns1', name: 'fast' } },
    });
    assert.deepEqual(
      parseClaimConfig(
        { network: 'other/fast', interfaceName: 'net1', ips: ['10.1.0.5/24', 'fd00::5/64'], mac: '02:AA:00:00:00:05' },
        'ns1',
      ),
      {
        ok: true,
        value: {
          network: { namespace: 'other', name: 'fast' },
          interfaceName: 'net1',
          ips: ['10.1.0.5/24', 'fd00::5/64'],
          mac: '02:aa:00:00:00:05',
        },
      },
    );
  });
  it('refuses what does not parse, naming the field and the reason', () => {
    const cases: [unknown, RegExp][] = [
      [{}, /^network: /],
      [{ network: 'a/b/c' }, /^network: must be a NetworkAttachmentDefinition/],
      [{ network: 'fast', interfaceName: 'a-name-longer-than-15' }, /^interfaceName: is longer than 15 bytes/],
      [{ network: 'fast', ips: ['10.1.0.5'] }, /^ips\[0\]: must be an address with its prefix/],
      [{ network: 'fast', mac: 'zz' }, /^mac: must be a MAC address/],
      [{ network: 'fast', vlan: 5 }, /vlan/],
      ['text', /^parameters: /],
    ];
    for (const [input, want] of cases) {
      const r = parseClaimConfig(input, 'ns');
      assert.ok(!r.ok, JSON.stringify(input));
      assert.match(r.error, want, JSON.stringify(input));
    }
  });
  it("for a request: the last plexus.io entry that applies wins, other drivers' entries are ignored, errors say where", () => {
    const configs = [
      { source: 'FromClass', opaque: { driver: 'plexus.io', parameters: { network: 'class-net' } } },
      { source: 'FromClaim', requests: ['nic'], opaque: { driver: 'plexus.io', parameters: { network: 'claim-net' } } },
      { source: 'FromClaim', requests: ['nic'], opaque: { driver: 'other.example.com', parameters: { anything: 1 } } },
    ];
    assert.deepEqual(configForRequest(configs, 'nic', 'ns'), {
      ok: true,
      value: { network: { namespace: 'ns', name: 'claim-net' } },
    });
    assert.deepEqual(configForRequest(configs, 'other', 'ns'), {
      ok: true,
      value: { network: { namespace: 'ns', name: 'class-net' } },
    });
    assert.deepEqual(configForRequest(configs, 'nic/sub', 'ns'), {
      ok: true,
      value: { network: { namespace: 'ns', name: 'claim-net' } },
    });
    assert.deepEqual(configForRequest([], 'nic', 'ns'), { ok: true, value: undefined });
    const bad = configForRequest(
      [{ source: 'FromClaim', opaque: { driver: 'plexus.io', parameters: { network: 'x', mac: '1' } } }],
      'nic',
      'ns',
    );
    assert.deepEqual(bad, {
      ok: false,
      error:
        'opaque config for plexus.io from the claim (config[0], request nic): mac: must be a MAC address like 02:00:00:00:00:05',
    });
  });
});

/** Claims a test hands the preparer, as the API would answer them. */
class FakeClaims implements ClaimReader {
  readonly claims = new Map<string, ResourceClaim>();
  get(namespace: string, name: string): Promise<{ ok: true; value: ResourceClaim | undefined }> {
    return Promise.resolve({ ok: true, value: this.claims.get(`${namespace}/${name}`) });
  }
  add(
    name: string,
    uid: string,
    device: string,
    parameters?: unknown,
    pod = { name: `pod-${name}`, uid: `pod-${uid}` },
  ): { namespace: string; name: string; uid: string } {
    this.claims.set(`ns/${name}`, {
      metadata: { namespace: 'ns', name, uid },
      status: {
        allocation: {
          devices: {
            results: [{ request: 'nic', driver: 'plexus.io', pool: 'n1/plexus.io/memif', device }],
            config:
              parameters === undefined ? [] : [{ source: 'FromClaim', opaque: { driver: 'plexus.io', parameters } }],
          },
        },
        reservedFor: [{ resource: 'pods', ...pod }],
      },
    });
    return { namespace: 'ns', name, uid };
  }
}

/** Two memif devices offered as DRA devices, their sockets made under a directory of the test's. */
const memifInventory = (): DraInventory =>
  new DraInventory(
    parseResourcesOk([{ name: 'plexus.io/memif', kind: 'memif', count: 2, socketDir: freshDir(), offer: ['dra'] }]),
    { nodeName: 'n1' },
  );

/** A preparer of claims on the memif inventory, as the DRA driver makes it; `more` are its other dependencies. */
const memifPreparer = (
  claims: ClaimReader,
  prepared: PreparedClaims,
  more: Omit<ConstructorParameters<typeof ClaimPreparer>[0], 'claims' | 'inventory' | 'prepared' | 'log'> = {},
): ClaimPreparer => new ClaimPreparer({ claims, inventory: memifInventory(), prepared, log: silent, ...more });

describe('preparing claims', () => {
  it("records the claim durably: a new store on the same state dir (plexusd restarted) knows the pod's device", async () => {
    const state = freshDir();
    const claims = new FakeClaims();
    const preparer = memifPreparer(claims, PreparedClaims.open(state));
    const ref = claims.add('a', 'uid-a', 'memif0', { network: 'fast', interfaceName: 'net1' });
    const answer = await preparer.prepare([ref]);
    assert.deepEqual(answer, {
      'uid-a': {
        devices: [
          { request_names: ['nic'], pool_name: 'n1/plexus.io/memif', device_name: 'memif0', cdi_device_ids: [] },
        ],
        error: '',
      },
    });
    const reopened = PreparedClaims.open(state);
    const { socket, secret } = reopened.get('uid-a')!.devices[0]!;
    assert.ok(socket && secret, "the memif device's socket and secret are in the record");
    assert.deepEqual(reopened.forNetwork('pod-uid-a', { namespace: 'ns', name: 'fast' }), {
      socket,
      secret,
      claim: { namespace: 'ns', name: 'a', uid: 'uid-a' },
      request: 'nic',
      pool: 'n1/plexus.io/memif',
      device: 'memif0',
      resourceName: 'plexus.io/memif',
      kind: 'memif',
      deviceID: 'memif0',
      network: { namespace: 'ns', name: 'fast' },
      interfaceName: 'net1',
    });
    assert.equal(reopened.forNetwork('pod-uid-a', { namespace: 'ns', name: 'slow' }), undefined);
    assert.deepEqual(await preparer.prepare([ref]), answer, 'asked again: the same answer');
    await preparer.unprepare([ref]);
    assert.deepEqual(readdirSync(join(state, 'dra', 'claims')), []);
    assert.deepEqual(PreparedClaims.open(state).all(), []);
  });
  it('a claim shared by pods is found by the pods it was reserved for at Prepare, and by name for one reserved later', async () => {
    const claims = new FakeClaims();
    const prepared = PreparedClaims.open(undefined);
    await memifPreparer(claims, prepared).prepare([
      claims.add('shared', 'uid-s', 'memif0', { network: 'fast' }, { name: 'first', uid: 'uid-first' }),
    ]);
    assert.equal(prepared.forPod('uid-first').length, 1);
    assert.equal(prepared.forPod('uid-second').length, 0);
    assert.equal(prepared.forPod('uid-second', { namespace: 'ns', claims: ['shared'] })[0]?.device, 'memif0');
    assert.equal(prepared.forPod('uid-second', { namespace: 'other', claims: ['shared'] }).length, 0);
    // The claim made again under its name: its new record, not the old one not yet released, is the one named.
    const again = { ...prepared.get('uid-s')!, uid: 'uid-s2', preparedAt: '9999-01-01T00:00:00.000Z' };
    prepared.record({ ...again, pods: [], devices: again.devices.map((d) => ({ ...d, device: 'memif1' })) });
    assert.deepEqual(
      prepared.forPod('uid-second', { namespace: 'ns', claims: ['shared'] }).map((d) => d.device),
      ['memif1'],
    );
  });
  it('a claim without a network in its config is matched by resourceName, as Multus 4.3 matches a NAD', async () => {
    const claims = new FakeClaims();
    const prepared = PreparedClaims.open(undefined);
    await memifPreparer(claims, prepared).prepare([claims.add('m', 'uid-m', 'memif1')]);
    assert.equal(
      prepared.forNetwork('pod-uid-m', { namespace: 'ns', name: 'any' }, 'plexus.io/memif')?.deviceID,
      'memif1',
    );
    assert.equal(prepared.forNetwork('pod-uid-m', { namespace: 'ns', name: 'any' }, 'plexus.io/other'), undefined);
  });
  it('never gives one device to two claims: the second gets an error naming the first', async () => {
    const claims = new FakeClaims();
    const prepared = PreparedClaims.open(freshDir());
    const preparer = memifPreparer(claims, prepared);
    const first = claims.add('a', 'uid-a', 'memif0', { network: 'fast' });
    const second = claims.add('b', 'uid-b', 'memif0', { network: 'fast' });
    const answers = await Promise.all([preparer.prepare([first]), preparer.prepare([second])]);
    assert.equal(answers[0]['uid-a']!.error, '');
    assert.equal(
      answers[1]['uid-b']!.error,
      'device memif0 of pool n1/plexus.io/memif is already prepared for ResourceClaim ns/a (uid-a)',
    );
    assert.deepEqual(answers[1]['uid-b']!.devices, []);
    assert.deepEqual(
      prepared.all().map((c) => c.uid),
      ['uid-a'],
    );
  });
  it('refuses, per claim and with the reason, a bad config, a missing claim, a UID that changed, a device not offered', async () => {
    const claims = new FakeClaims();
    const prepared = PreparedClaims.open(freshDir());
    const preparer = memifPreparer(claims, prepared);
    const good = claims.add('good', 'uid-g', 'memif1', { network: 'fast' });
    const bad = claims.add('bad', 'uid-bad', 'memif0', { network: 'fast', ips: ['nope'] });
    const stale = { ...claims.add('stale', 'uid-new', 'memif0'), uid: 'uid-old' };
    const foreign = claims.add('foreign', 'uid-f', 'memif9');
    const answer = await preparer.prepare([good, bad, { namespace: 'ns', name: 'gone', uid: 'uid-x' }, stale, foreign]);
    assert.equal(answer['uid-g']!.error, '');
    assert.match(
      answer['uid-bad']!.error,
      /^opaque config for plexus.io from the claim \(config\[0\], request nic\): ips\[0\]: must be an address with its prefix/,
    );
    assert.equal(answer['uid-x']!.error, 'ResourceClaim ns/gone does not exist (deleted before the pod started?)');
    assert.equal(
      answer['uid-old']!.error,
      'ResourceClaim ns/stale has UID uid-new, not uid-old: it was deleted and made again',
    );
    assert.match(
      answer['uid-f']!.error,
      /^device memif9 of pool n1\/plexus.io\/memif is not offered by this node's plexusd/,
    );
    assert.deepEqual(
      prepared.all().map((c) => c.uid),
      ['uid-g'],
      'only the good claim is recorded',
    );
  });
  it('a device the device plugin has in a pod is refused (a resource offered both ways)', async () => {
    const claims = new FakeClaims();
    const preparer = memifPreparer(claims, PreparedClaims.open(undefined), {
      inUseByDevicePlugin: (_r, id) => Promise.resolve(id === 'memif0'),
    });
    const answer = await preparer.prepare([claims.add('a', 'uid-a', 'memif0', { network: 'fast' })]);
    assert.equal(
      answer['uid-a']!.error,
      'device memif0 of plexus.io/memif is in a pod through the device plugin: offer it one way only',
    );
  });
  it('a claim read the API did not answer (no answer, 429, 5xx) is tried again; a refusal (403) is not', async () => {
    const api = (...answers: { status: number; message?: string }[]) => {
      const asked: number[] = [];
      const client = {
        request: () => {
          const a = answers.shift()!;
          asked.push(a.status);
          return Promise.resolve(
            a.status === 200
              ? { ok: true, value: { metadata: { name: 'c', namespace: 'ns', uid: 'u' } } }
              : { ok: false, error: { status: a.status, message: a.message ?? 'x' } },
          );
        },
      };
      return { reader: new ApiClaimReader(client as unknown as KubeApiClient, [1, 1, 1]), asked };
    };
    const flaky = api({ status: 0 }, { status: 503 }, { status: 429 }, { status: 200 });
    const read = await flaky.reader.get('ns', 'c');
    assert.equal(read.ok && read.value?.metadata.uid, 'u');
    assert.deepEqual(flaky.asked, [0, 503, 429, 200]);
    const refused = api({ status: 403, message: 'forbidden' });
    assert.deepEqual(await refused.reader.get('ns', 'c'), {
      ok: false,
      error: 'reading ResourceClaim ns/c: 403 forbidden',
    });
    const down = api({ status: 503 }, { status: 503 }, { status: 503 }, { status: 503, message: 'down' });
    assert.deepEqual(await down.reader.get('ns', 'c'), { ok: false, error: 'reading ResourceClaim ns/c: 503 down' });
    assert.equal(down.asked.length, 4, 'three more tries, then the error');
  });
  it("a memif device's socket directory and secret are made at Prepare, kept in the record, removed at Unprepare", async () => {
    const socketDir = freshDir();
    const resources = [{ name: 'plexus.io/memif', kind: 'memif', count: 2, socketDir, offer: ['dra'] }];
    const inventory = new DraInventory(parseResourcesOk(resources), { nodeName: 'n1' });
    const claims = new FakeClaims();
    const prepared = PreparedClaims.open(freshDir());
    const preparer = new ClaimPreparer({ claims, inventory, prepared, log: silent });
    const ref = claims.add('m', 'uid-m', 'memif1', { network: 'memnet' });
    assert.equal((await preparer.prepare([ref]))['uid-m']!.error, '');
    const [device] = prepared.get('uid-m')!.devices;
    assert.equal(device!.socket, join(socketDir, 'memif1', 'memif.sock'));
    assert.match(device!.secret ?? '', /^[A-Za-z0-9]{20}$/);
    assert.ok(existsSync(join(socketDir, 'memif1')), 'the directory the switch will listen in');
    await preparer.unprepare([ref]);
    assert.ok(!existsSync(join(socketDir, 'memif1')));
  });
  it('a record cut off by a crash (its .tmp) is removed at open; an unreadable record is named, not loaded', () => {
    const state = freshDir();
    const dir = join(state, 'dra', 'claims');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'uid-1.json.tmp'), '{"v":1,');
    writeFileSync(join(dir, 'uid-2.json'), '{"v":99}');
    const store = PreparedClaims.open(state);
    assert.deepEqual(store.all(), []);
    assert.deepEqual(store.problems, [
      { path: join(dir, 'uid-2.json'), reason: 'is not a prepared-claim record: v: Invalid input: expected 1' },
    ]);
    assert.ok(!existsSync(join(dir, 'uid-1.json.tmp')));
  });
});

/** NADs by key: an existing one answers a definition (its content is not read), a missing one the API source's error. */
const nads = (...keys: string[]): NetworkReader => ({
  read: (namespace: string, name: string) =>
    Promise.resolve(
      keys.includes(`${namespace}/${name}`)
        ? ok({ key: `${namespace}/${name}` } as unknown as NetworkDefinition)
        : err(
            new CniError(
              CniCode.InvalidNetworkConfig,
              `network ${namespace}/${name} is not defined: there is no such NetworkAttachmentDefinition in the API`,
            ),
          ),
    ),
});

describe('preparing claims: the network a claim names', () => {
  it('a NAD that does not exist: the claim is refused with the NAD named, and nothing is recorded', async () => {
    const claims = new FakeClaims();
    const prepared = PreparedClaims.open(freshDir());
    const preparer = memifPreparer(claims, prepared, { networks: nads('ns/fast') });
    const answer = await preparer.prepare([
      claims.add('a', 'uid-a', 'memif0', { network: 'nope' }),
      claims.add('b', 'uid-b', 'memif1', { network: 'fast' }),
    ]);
    assert.equal(
      answer['uid-a']!.error,
      'the network named by the opaque config of request nic: network ns/nope is not defined: there is no such NetworkAttachmentDefinition in the API',
    );
    assert.deepEqual(answer['uid-a']!.devices, []);
    assert.equal(answer['uid-b']!.error, '');
    assert.deepEqual(
      prepared.all().map((c) => c.uid),
      ['uid-b'],
    );
  });
  it('namespace isolation: a NAD of another namespace is refused unless that namespace is global; default is shared', async () => {
    const claims = new FakeClaims();
    const prepared = PreparedClaims.open(undefined);
    const isolation = { namespaceIsolation: true, globalNamespaces: ['shared'] };
    const networks = nads('other/net', 'shared/net', 'default/net');
    const preparer = memifPreparer(claims, prepared, { networks, isolation });
    const answer = await preparer.prepare([claims.add('a', 'uid-a', 'memif0', { network: 'other/net' })]);
    assert.match(
      answer['uid-a']!.error,
      /^the opaque config of request nic: ResourceClaim of namespace ns: network other\/net is in namespace other, and namespace isolation is on \(--namespace-isolation\): pods of ns may use only networks of ns and of the global namespaces \(default, shared\); create the NetworkAttachmentDefinition in ns/,
    );
    assert.deepEqual(prepared.all(), []);
    for (const [i, network] of ['shared/net', 'default/net'].entries()) {
      const ok1 = await preparer.prepare([claims.add(`g${i}`, `uid-g${i}`, `memif${i}`, { network })]);
      assert.equal(ok1[`uid-g${i}`]!.error, '', network);
    }
  });
  it('a claim that names no network (matched by resourceName) needs no NAD at Prepare', async () => {
    const claims = new FakeClaims();
    const preparer = memifPreparer(claims, PreparedClaims.open(undefined), { networks: nads() });
    assert.equal((await preparer.prepare([claims.add('m', 'uid-m', 'memif0')]))['uid-m']!.error, '');
  });
});

/** Pods a test says exist (namespace/name/uid), or an API that cannot answer. */
const podsThere = (...keys: string[]): PodPresence => ({
  exists: (namespace, name, uid) => Promise.resolve(ok(keys.includes(`${namespace}/${name}/${uid}`))),
});

describe('stale prepared claims', () => {
  const setup = async (): Promise<{
    claims: FakeClaims;
    prepared: PreparedClaims;
    preparer: ClaimPreparer;
    state: string;
  }> => {
    const state = freshDir();
    const claims = new FakeClaims();
    const prepared = PreparedClaims.open(state);
    const preparer = memifPreparer(claims, prepared);
    await preparer.prepare([
      claims.add('a', 'uid-a', 'memif0', { network: 'fast' }),
      claims.add('b', 'uid-b', 'memif1', { network: 'fast' }),
    ]);
    return { claims, prepared, preparer, state };
  };
  it('a record whose claim is gone is released (file removed, device free for the next claim); a live one stays', async () => {
    const { claims, prepared, preparer, state } = await setup();
    claims.claims.delete('ns/a');
    const released = await preparer.releaseStale({
      claims,
      pods: podsThere('ns/pod-a/pod-uid-a', 'ns/pod-b/pod-uid-b'),
      log: silent,
    });
    assert.deepEqual(released, ['ns/a']);
    assert.deepEqual(
      prepared.all().map((c) => c.uid),
      ['uid-b'],
    );
    assert.deepEqual(readdirSync(join(state, 'dra', 'claims')), ['uid-b.json']);
    const next = await preparer.prepare([claims.add('c', 'uid-c', 'memif0', { network: 'fast' })]);
    assert.equal(next['uid-c']!.error, '', 'memif0 can be prepared again');
  });
  it('a record whose claim was made again under its name (another UID), or whose pods are all gone, is released', async () => {
    const { claims, prepared, preparer } = await setup();
    claims.add('a', 'uid-a2', 'memif0', { network: 'fast' });
    const released = await preparer.releaseStale({ claims, pods: podsThere(), log: silent });
    assert.deepEqual(released.sort(), ['ns/a', 'ns/b']);
    assert.deepEqual(prepared.all(), []);
  });
  it('kept while its pod still has networks on this node (the device may be in its sandbox), or the API cannot say', async () => {
    const { claims, prepared, preparer } = await setup();
    claims.claims.clear();
    const attachedPods = (): Promise<ReadonlySet<string>> => Promise.resolve(new Set(['pod-uid-a']));
    const failing: typeof claims = Object.assign(Object.create(claims) as FakeClaims, {
      get: async (ns: string, name: string) =>
        name === 'b' ? err('reading ResourceClaim ns/b: 503 unavailable') : claims.get(ns, name),
    });
    assert.deepEqual(
      await preparer.releaseStale({ claims: failing, pods: podsThere(), attachedPods, log: silent }),
      [],
    );
    assert.deepEqual(
      prepared
        .all()
        .map((c) => c.uid)
        .sort(),
      ['uid-a', 'uid-b'],
    );
  });
});

describe('the DRA driver at start', () => {
  it('serves the kubelet plugin before the slices are published; a stale record goes before the first Prepare', async () => {
    const state = freshDir();
    const claims = new FakeClaims();
    const before = memifPreparer(claims, PreparedClaims.open(state));
    await before.prepare([claims.add('old', 'uid-old', 'memif0', { network: 'fast' })]);
    claims.claims.delete('ns/old');
    let publish = (): void => undefined;
    const published = new Promise<void>((resolve) => (publish = resolve));
    const api = {
      request: async (method: string, path: string) => {
        if (path.includes('resourceslices')) await published; // an API too busy to list the slices yet
        return { ok: true, value: method === 'GET' ? { items: [] } : {} };
      },
    };
    const resources = parseResourcesOk([
      { name: 'plexus.io/memif', kind: 'memif', count: 2, socketDir: freshDir(), offer: ['dra'] },
    ]);
    const settings = { nodeName: 'n1', kubeletRoot: freshDir(), stateDir: state };
    const ports = { api: api as unknown as KubeApiClient, claims, pods: podsThere() };
    const dra = DraDriver.create(resources, ports, settings, silent)!;
    const started = dra.start();
    const served = await Promise.race([started.then(() => true), new Promise((r) => setTimeout(() => r(false), 3000))]);
    const client: grpc.Client = new (loadDraServices().DraPluginClient.v1)(
      `unix://${dra.plugin.sockets.service}`,
      grpc.credentials.createInsecure(),
    );
    try {
      assert.ok(served, 'started (sockets served) while the slices are still waiting for the API');
      assert.ok(existsSync(dra.plugin.sockets.registration));
      const ref = claims.add('new', 'uid-new', 'memif0', { network: 'fast' });
      const answer = await unary<unknown, NodePrepareResourcesResponse>(
        client,
        'NodePrepareResources',
        { claims: [ref] },
        5000,
      );
      assert.equal(answer.claims['uid-new']?.error, '', 'memif0 was freed from the stale record first');
    } finally {
      publish();
      client.close();
      await started;
      await dra.stop();
    }
  });
});

describe('the DRA driver and the memif driver', () => {
  it('memifSocket answers the socket and secret of a memif device a prepared claim holds, and nothing for others', async () => {
    const socketDir = freshDir();
    const resources = parseResourcesOk([
      { name: 'plexus.io/memif', kind: 'memif', count: 2, socketDir, offer: ['dra'] },
    ]);
    const claims = new FakeClaims();
    const settings = { nodeName: 'n1', kubeletRoot: freshDir(), stateDir: freshDir() };
    const api = { request: () => Promise.resolve({ ok: true, value: { items: [] } }) };
    const dra = DraDriver.create(resources, { api: api as unknown as KubeApiClient, claims }, settings, silent)!;
    await dra.start();
    const client: grpc.Client = new (loadDraServices().DraPluginClient.v1)(
      `unix://${dra.plugin.sockets.service}`,
      grpc.credentials.createInsecure(),
    );
    try {
      const ref = claims.add('m', 'uid-m', 'memif0', { network: 'memnet' });
      await unary(client, 'NodePrepareResources', { claims: [ref] }, 5000);
      const held = dra.memifSocket('plexus.io/memif', 'memif0');
      const record = dra.prepared.get('uid-m')!.devices[0]!;
      assert.deepEqual(held, {
        ok: true,
        value: { hostSocket: join(socketDir, 'memif0', 'memif.sock'), podSocket: record.socket, secret: record.secret },
      });
      assert.equal(dra.memifSocket('plexus.io/memif', 'memif1'), undefined, 'no claim holds memif1');
    } finally {
      client.close();
      await dra.stop();
    }
  });
});

describe('the kubelet plugin sockets', () => {
  it('Registration.GetInfo names driver plexus.io, its endpoint and v1 then v1beta1; both DRAPlugin versions prepare', async () => {
    const kubeletRoot = freshDir();
    const claims = new FakeClaims();
    const preparer = memifPreparer(claims, PreparedClaims.open(undefined));
    const statuses: boolean[] = [];
    const server = new DraPluginServer(kubeletRoot, preparer, silent, {
      registered: (s) => statuses.push(s.plugin_registered),
    });
    await server.start();
    const services = loadDraServices();
    const reg = new services.RegistrationClient(
      `unix://${server.sockets.registration}`,
      grpc.credentials.createInsecure(),
    );
    try {
      assert.equal(server.sockets.registration, join(kubeletRoot, 'plugins_registry', 'plexus.io-reg.sock'));
      const info = await unary<unknown, PluginInfo>(reg, 'GetInfo', {}, 5000);
      assert.deepEqual(info, {
        type: 'DRAPlugin',
        name: 'plexus.io',
        endpoint: join(kubeletRoot, 'plugins', 'plexus.io', 'dra.sock'),
        supported_versions: [...SUPPORTED_SERVICES],
      });
      assert.deepEqual(SUPPORTED_SERVICES, ['v1.DRAPlugin', 'v1beta1.DRAPlugin']);
      await unary(reg, 'NotifyRegistrationStatus', { plugin_registered: true, error: '' }, 5000);
      assert.deepEqual(statuses, [true]);
      for (const [i, v] of (['v1', 'v1beta1'] as const).entries()) {
        const dra: grpc.Client = new services.DraPluginClient[v](
          `unix://${info.endpoint}`,
          grpc.credentials.createInsecure(),
        );
        const ref = claims.add(`c${i}`, `uid-${i}`, `memif${i}`, { network: 'fast' });
        const answer: NodePrepareResourcesResponse = await unary<unknown, NodePrepareResourcesResponse>(
          dra,
          'NodePrepareResources',
          { claims: [ref] },
          5000,
        );
        assert.equal(answer.claims[ref.uid]?.devices[0]?.device_name, `memif${i}`, v);
        const freed = await unary<unknown, { claims: Record<string, { error: string }> }>(
          dra,
          'NodeUnprepareResources',
          { claims: [ref] },
          5000,
        );
        assert.deepEqual(freed.claims, { [ref.uid]: { error: '' } });
        dra.close();
      }
    } finally {
      reg.close();
      await server.stop();
    }
    assert.ok(
      !existsSync(server.sockets.registration) && !existsSync(server.sockets.service),
      'sockets removed at stop',
    );
  });
  it('the service socket takes connections before the registration socket exists (the kubelet dials it at once)', async () => {
    const kubeletRoot = freshDir();
    const preparer = memifPreparer(new FakeClaims(), PreparedClaims.open(undefined));
    const server = new DraPluginServer(kubeletRoot, preparer, silent);
    mkdirSync(join(kubeletRoot, 'plugins_registry'));
    const dials: Promise<boolean>[] = [];
    const watcher = watch(join(kubeletRoot, 'plugins_registry'), (_event, file) => {
      if (file === 'plexus.io-reg.sock' && existsSync(server.sockets.registration))
        dials.push(accepts(server.sockets.service));
    });
    try {
      await server.start();
      await untilTrue('a dial of the service socket', () => dials.length > 0, 5000, 5);
      assert.deepEqual(
        await Promise.all(dials),
        dials.map(() => true),
      );
    } finally {
      watcher.close();
      await server.stop();
    }
  });
  it('at stop the registration socket goes before the service socket, and a Prepare under way is still answered', async () => {
    const kubeletRoot = freshDir();
    const claims = new FakeClaims();
    let release = (): void => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    let asked = false;
    const slow: ClaimReader = {
      get: async (ns, name) => {
        asked = true;
        await held;
        return claims.get(ns, name);
      },
    };
    const preparer = memifPreparer(slow, PreparedClaims.open(undefined));
    const server = new DraPluginServer(kubeletRoot, preparer, silent);
    await server.start();
    const gone: string[] = [];
    const watchers = [server.sockets.registration, server.sockets.service].map((path) =>
      watch(join(path, '..'), (_event, file) => {
        if (file && join(path, '..', file) === path && !existsSync(path)) gone.push(file);
      }),
    );
    const dra: grpc.Client = new (loadDraServices().DraPluginClient.v1)(
      `unix://${server.sockets.service}`,
      grpc.credentials.createInsecure(),
    );
    try {
      const ref = claims.add('c', 'uid-c', 'memif0', { network: 'fast' });
      const answer = unary<unknown, NodePrepareResourcesResponse>(dra, 'NodePrepareResources', { claims: [ref] }, 5000);
      await untilTrue('the Prepare to ask for its claim', () => asked, 5000, 5);
      const stopped = server.stop();
      await untilTrue('the first socket to go', () => gone.length > 0, 5000, 5);
      release();
      assert.equal((await answer).claims['uid-c']?.error, '', 'the call under way is answered');
      await stopped;
      await untilTrue('both sockets to go', () => gone.length === 2, 5000, 5);
      assert.deepEqual(gone, ['plexus.io-reg.sock', 'dra.sock']);
    } finally {
      release();
      for (const w of watchers) w.close();
      dra.close();
      await server.stop();
    }
  });
  it('a registration socket removed from under it is served again within the check interval', async () => {
    const kubeletRoot = freshDir();
    const preparer = memifPreparer(new FakeClaims(), PreparedClaims.open(undefined));
    const server = new DraPluginServer(kubeletRoot, preparer, silent, {}, { checkIntervalMs: 50 });
    await server.start();
    try {
      rmSync(server.sockets.registration);
      for (let i = 0; i < 100 && !existsSync(server.sockets.registration); i++)
        await new Promise((r) => setTimeout(r, 20));
      assert.ok(existsSync(server.sockets.registration));
    } finally {
      await server.stop();
    }
  });
});

/** Whether a unix socket takes a connection now. */
const accepts = (path: string): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = connect(path);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
