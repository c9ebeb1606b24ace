/**
 * A prepared-claim record is checked against the resources file before its device is moved: a record naming a device
 * that no offered pool has (the resources file changed after Prepare, or the record was damaged or written by hand)
 * makes the pod's ADD fail, naming the claim and the device, and the device stays on the host. The engine runs
 * in-process on the real kernel; veths the test creates stand in for NICs.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { parseCniRequest } from '../../src/cni/request';
import type { CniError } from '../../src/cni/errors';
import { parseResources } from '../../src/deviceplugin/config';
import { DraDriver } from '../../src/dra';
import type { PreparedClaim } from '../../src/dra/prepared-claims';
import { hostVethName } from '../../src/drivers/bridge';
import { DriverRegistry } from '../../src/drivers/registry';
import { AttachmentEngine } from '../../src/engine/engine';
import { Journal } from '../../src/engine/journal';
import type { ClaimedDeviceOutcome } from '../../src/engine/claims/ports';
import { Ipam } from '../../src/ipam';
import type { KubeApiClient } from '../../src/k8s/api-client';
import { Kernel } from '../../src/kernel/kernel';
import { NetworkDirectory } from '../../src/networks/directory';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { ip, ipTry, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const prefix = uniquePrefix('dck');
const fx = new NetnsFixture(prefix);
const dir = mkdtempSync(join(tmpdir(), 'plexus-dra-checks-'));
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
const OFFERED = `${prefix}n0`;
const ROGUE = `${prefix}r0`;
let kernel: Kernel;
let engine: AttachmentEngine;
const failed: string[] = [];
const settled: ClaimedDeviceOutcome[] = [];

restoreForwardingAfterwards();

/** A veth on the host standing in for a NIC, its peer in a netns of the test's so nothing leaves our namespaces. */
function hostNic(name: string): void {
  const far = fx.create(`far-${name}`);
  fx.trackHostLink(name);
  ip('link', 'add', name, 'type', 'veth', 'peer', 'name', 'far0', 'netns', far.name);
}
const onHost = (name: string): boolean => ipTry('link', 'show', name).status === 0;

function nad(name: string, config: Record<string, unknown>): void {
  writeFileSync(
    join(dir, 'networks', `${name}.json`),
    JSON.stringify({
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name, namespace: 'default' },
      spec: { config: JSON.stringify({ cniVersion: '1.0.0', name, ...config }) },
    }),
  );
}

/** A record as Prepare writes it, for the pod with UID uid-<pod>, naming device `device` of pool n1/plexus.io/nic. */
function writeRecord(claim: string, pod: string, device: string): void {
  const record: PreparedClaim = {
    v: 1,
    uid: `uid-${claim}`,
    namespace: 'default',
    name: claim,
    pods: [{ name: pod, uid: `uid-${pod}` }],
    devices: [
      {
        request: 'nic',
        pool: 'n1/plexus.io/nic',
        device,
        resourceName: 'plexus.io/nic',
        kind: 'host-device',
        deviceID: device,
        network: { namespace: 'default', name: 'nic' },
        interfaceName: 'net1',
      },
    ],
    preparedAt: new Date().toISOString(),
  };
  writeFileSync(join(dir, 'state', 'dra', 'claims', `uid-${claim}.json`), JSON.stringify(record));
}

before(async () => {
  mkdirSync(join(dir, 'networks'));
  mkdirSync(join(dir, 'state', 'dra', 'claims'), { recursive: true });
  fx.trackHostLink(`${prefix}b0`);
  hostNic(OFFERED);
  hostNic(ROGUE);
  nad('podnet', {
    type: 'bridge',
    bridge: `${prefix}b0`,
    isGateway: true,
    ipam: { type: 'host-local', ranges: [[{ subnet: `10.${o}.${t}.0/24` }]] },
  });
  nad('nic', { type: 'host-device' });
  // Hand-written records: one for the offered device, one naming a veth outside every offered pool.
  writeRecord('good', 'good-pod', OFFERED);
  writeRecord('rogue', 'rogue-pod', ROGUE);
  const resources = parseResources({
    resources: [{ name: 'plexus.io/nic', kind: 'host-device', devices: [OFFERED], offer: ['dra'] }],
  });
  if (!resources.ok) throw resources.error;
  const api = { request: () => Promise.resolve({ ok: true, value: { items: [] } }) } as unknown as KubeApiClient;
  const settings = { nodeName: 'n1', kubeletRoot: join(dir, 'kubelet'), stateDir: join(dir, 'state') };
  const dra = DraDriver.create(resources.value, { api }, settings, pino({ level: 'silent' }))!;
  kernel = new Kernel();
  engine = new AttachmentEngine({
    ports: {
      kernel,
      ipam: await Ipam.open(join(dir, 'ipam'), { sync: false }),
      journal: await Journal.open(join(dir, 'journal'), false),
      networks: new NetworkDirectory(join(dir, 'networks')),
      drivers: new DriverRegistry(),
      claims: dra.claimed,
      claimSink: { settled: (_pod, outcomes) => settled.push(...outcomes), released: () => undefined },
      statusSink: {
        attached: () => undefined,
        detached: () => undefined,
        failed: (pod, _cid, e: CniError) => failed.push(`${pod.name}: ${e.message}`),
      },
    },
    settings: {
      cniBinDir: DEBIAN_PLUGINS,
      naming: 'multus',
      selectionAnnotation: true,
      defaultNetworks: [],
      defaultNetwork: 'podnet',
    },
    log: pino({ level: 'silent' }),
  });
});
after(async () => {
  fx.cleanup();
  await kernel?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A CNI call for pod `pod` (UID uid-<pod>) in `netns`, as plexus-cni forwards it. */
function call(command: 'ADD' | 'DEL', pod: string, netns: string) {
  const parsed = parseCniRequest({
    env: {
      CNI_COMMAND: command,
      CNI_CONTAINERID: `${prefix}${pod}`,
      CNI_NETNS: netns,
      CNI_IFNAME: 'eth0',
      CNI_PATH: DEBIAN_PLUGINS,
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${pod};K8S_POD_UID=uid-${pod}`,
    },
    stdin: JSON.stringify({ cniVersion: '1.0.0', name: 'plexus', type: 'plexus-cni' }),
  });
  if (!parsed.ok) throw parsed.error;
  return parsed.value as Parameters<AttachmentEngine['add']>[0];
}

describe("a prepared claim's device is checked against the offered pools at ADD", () => {
  it('a record naming a device of no offered pool: ADD fails naming the claim and the device, which stays on the host', async () => {
    const pod = fx.create('rogue');
    fx.trackHostLink(hostVethName(`${prefix}rogue-pod`, 'eth0', 'eth0'));
    const added = await engine.add(call('ADD', 'rogue-pod', pod.path));
    if (added.ok) await engine.del(call('DEL', 'rogue-pod', pod.path)); // gives the veth back before failing
    assert.ok(!added.ok, 'refused');
    assert.equal(added.error.code, 4);
    assert.equal(
      added.error.message,
      `device ${ROGUE} of ResourceClaim default/rogue (uid-rogue) is not one this node offers: its prepared record is not acted on`,
    );
    assert.match(added.error.details, /pool n1\/plexus\.io\/nic has no device/);
    assert.ok(onHost(ROGUE), 'the device is still on the host');
    assert.deepEqual(podLinks(pod.name), [], 'nothing made in the pod');
    assert.deepEqual(failed, [`rogue-pod: ${added.error.message}`], 'reported as the pod’s event');
    assert.equal(settled.at(-1)?.error, added.error.message, "and in the claim's status");
  });
  it('a record naming a device of an offered pool: ADD moves it into the pod', async () => {
    const pod = fx.create('good');
    fx.trackHostLink(hostVethName(`${prefix}good-pod`, 'eth0', 'eth0'));
    const added = await engine.add(call('ADD', 'good-pod', pod.path));
    assert.ok(added.ok, !added.ok ? added.error.message : '');
    assert.deepEqual(podLinks(pod.name), ['eth0', 'net1']);
    assert.ok(!onHost(OFFERED));
    assert.ok((await engine.del(call('DEL', 'good-pod', pod.path))).ok);
    assert.ok(onHost(OFFERED), 'back on the host after DEL');
  });
});
