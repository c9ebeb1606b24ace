/**
 * plexusd as the DRA driver plexus.io on a real node (SingleNode: a cluster of one node with its scheduler and
 * controller-manager, plexusd inside the node, veths in the node for NICs): plexusd registers with the kubelet's plugin
 * registry, publishes the node's ResourceSlice with each device's attributes, the kubelet calls NodePrepareResources
 * for a pod whose ResourceClaimTemplate asks for a plexus.io device (the prepared claim is recorded under the state
 * dir) and NodeUnprepareResources when the pod goes (the device goes to the next claim), and opaque config that does
 * not parse keeps the pod from starting with an error that names the field. plexusd runs as the `plexus` user with
 * deploy/10-rbac.yaml and deploy/dra/50-dra.yaml.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture } from '../support/daemon';
import { PAUSE_IMAGE } from '../support/kube-node';
import { ensureNamespace } from '../support/cluster/pods';
import { SingleNode } from '../support/cluster/single-node';
import { addNicStandIn, ip, uniquePrefix } from '../support/netns';
import { until } from '../support/until';
import {
  bridgeConfList,
  draNodeMissing,
  draRegistrations,
  draSettings,
  draTooOld,
  installDra,
  podEvents,
} from '../support/dra-node';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const missing = draNodeMissing();
const skip = expectedPrerequisites(missing) || optionalSkip(missing ? undefined : draTooOld());
const prefix = uniquePrefix('dra');
const NIC = 'plexus.io/testnic';
const NICS = [`${prefix}n0`, `${prefix}n1`];
const PEERS = [`${prefix}p0`, `${prefix}p1`];
const NS = 'default';
const RESOURCE = '/apis/resource.k8s.io/v1';

interface Slice {
  spec: {
    driver: string;
    nodeName: string;
    pool: { name: string; generation: number };
    devices: { name: string; attributes: Record<string, Record<string, unknown>> }[];
  };
}

describe('plexusd as the DRA driver plexus.io on a real node', { skip }, () => {
  let node: SingleNode;
  let daemon: DaemonFixture;
  let work: string;

  const call = (method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> =>
    node.call(method, path, body);
  const created = async (path: string, body: unknown): Promise<void> => {
    const r = await call('POST', path, body);
    assert.ok(
      r.status === 201 || r.status === 409,
      `POST ${path}: ${r.status} ${JSON.stringify(r.body).slice(0, 400)}`,
    );
  };
  const slices = async (): Promise<Slice[]> => {
    const r = await call(
      'GET',
      `${RESOURCE}/resourceslices?fieldSelector=${encodeURIComponent(`spec.nodeName=${node.nodeName}`)}`,
    );
    return (r.body as { items: Slice[] }).items;
  };
  const claimFiles = (): string[] => {
    const dir = join(daemon.stateDir, 'dra', 'claims');
    return existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.json')) : [];
  };
  const eventsOf = (name: string): Promise<string[]> => podEvents(node, NS, name);
  const registrations = (): number => draRegistrations(daemon);
  const phase = async (name: string): Promise<string | undefined> =>
    (await node.pod(NS, name).catch(() => undefined))?.status?.phase;

  /** A template for one host device of the pool, chosen by interface name, with this opaque config. */
  const template = (name: string, ifname: string, parameters: unknown): unknown => ({
    apiVersion: 'resource.k8s.io/v1',
    kind: 'ResourceClaimTemplate',
    metadata: { name, namespace: NS },
    spec: {
      spec: {
        devices: {
          requests: [
            {
              name: 'nic',
              exactly: {
                deviceClassName: 'host-device.plexus.io',
                selectors: [{ cel: { expression: `device.attributes["plexus.io"].interfaceName == "${ifname}"` } }],
              },
            },
          ],
          config: [{ requests: ['nic'], opaque: { driver: 'plexus.io', parameters } }],
        },
      },
    },
  });
  /** A pod the scheduler places (no spec.nodeName: a pod with claims must be allocated by the scheduler). */
  const claimingPod = (name: string, templateName: string): unknown => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: NS },
    spec: {
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      terminationGracePeriodSeconds: 1,
      resourceClaims: [{ name: 'nic', resourceClaimTemplateName: templateName }],
      containers: [
        { name: 'c', image: PAUSE_IMAGE, imagePullPolicy: 'Never', resources: { claims: [{ name: 'nic' }] } },
      ],
    },
  });
  const deletePod = async (name: string): Promise<void> => {
    await call('DELETE', `/api/v1/namespaces/${NS}/pods/${name}`);
    await until(
      `pod ${name} gone from the API`,
      async () => ((await call('GET', `/api/v1/namespaces/${NS}/pods/${name}`)).status === 404 ? true : undefined),
      60000,
      200,
    );
  };

  /** NIC `i` (a veth end) and its peer, both up, in the node's network namespace. */
  const addNic = (i: number): void => addNicStandIn(node.netns, NICS[i]!, PEERS[i]!);

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'plexus-dra-'));
    writeFileSync(
      join(work, 'resources.yaml'),
      JSON.stringify({ resources: [{ name: NIC, kind: 'host-device', devices: NICS, offer: ['dra'] }] }),
    );
    node = await SingleNode.start({ cniBinDir: DEBIAN_PLUGINS, cniConfList: bridgeConfList(`${prefix}br`) });
    // veth ends in the node stand in for its NICs; each peer, kept up beside it, gives its end carrier.
    for (const i of NICS.keys()) addNic(i);
    // The NAD the claims' config names: Prepare refuses a claim naming one that does not exist.
    assert.equal(
      (await node.api.createNad(NS, 'fast', JSON.stringify({ cniVersion: '1.0.0', name: 'fast', type: 'host-device' })))
        .status,
      201,
    );
    // deploy/dra/50-dra.yaml as written (DeviceClasses, the plexus-dra role), its role also bound to the test's user.
    await installDra(node);
    // The controller-manager makes sa/default some time after the API server starts; a pod posted before it is
    // refused by the ServiceAccount admission (createPods makes it too, these pods are posted as written).
    await ensureNamespace(node.api, NS);
    daemon = new DaemonFixture('podnet');
    daemon.launcher = node.launcher; // the DaemonSet's plexusd runs in the node's namespaces (hostNetwork)
    daemon.addSettings({ ...draSettings(node, work), logLevel: 'info' });
  });

  after(async () => {
    await node?.stop({ runtimeStopped: () => daemon?.stop() });
    await daemon?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('registers with the kubelet through its plugin registry', async () => {
    const startedAt = Date.now();
    await daemon.start(30000);
    await until(
      "the kubelet's registration of plexus.io",
      () => (draRegistrations(daemon) > 0 ? true : undefined),
      30000,
      100,
    );
    assert.ok(existsSync(join(node.kubeletRoot, 'plugins_registry', 'plexus.io-reg.sock')));
    assert.ok(existsSync(join(node.kubeletRoot, 'plugins', 'plexus.io', 'dra.sock')));
    assert.doesNotMatch(daemon.stderr, /refused the DRA driver/);
    console.log(`# plexusd start to registered with the kubelet: ${Date.now() - startedAt} ms`);
  });

  it("publishes the node's ResourceSlice: one pool, each device with its interface name, deviceID and resourceName", async () => {
    const [slice] = await until('a plexus.io ResourceSlice for the node', async () => {
      const found = (await slices()).filter((s) => s.spec.driver === 'plexus.io');
      return found.length ? found : undefined;
    });
    assert.equal(slice!.spec.nodeName, node.nodeName);
    assert.equal(slice!.spec.pool.name, `${node.nodeName}/${NIC}`);
    assert.deepEqual(
      slice!.spec.devices.map((d) => d.name),
      NICS,
    );
    for (const [i, device] of slice!.spec.devices.entries()) {
      assert.deepEqual(
        device.attributes,
        {
          'plexus.io/kind': { string: 'host-device' },
          'plexus.io/interfaceName': { string: NICS[i] },
          'k8s.cni.cncf.io/deviceID': { string: NICS[i] },
          'k8s.cni.cncf.io/resourceName': { string: NIC },
        },
        'a veth has no PCI address, PCIe root or NUMA node',
      );
    }
  });

  it('a pod with a ResourceClaimTemplate runs once the kubelet had plexusd prepare its claim, recorded durably', async () => {
    await created(
      `${RESOURCE}/namespaces/${NS}/resourceclaimtemplates`,
      template('nic0', NICS[0]!, { network: 'fast', interfaceName: 'net1', ips: ['10.9.0.5/24'] }),
    );
    const startedAt = Date.now();
    await created(`/api/v1/namespaces/${NS}/pods`, claimingPod('dra-a', 'nic0'));
    await until(
      'pod dra-a Running',
      async () => ((await phase('dra-a')) === 'Running' ? true : undefined),
      90000,
      200,
    ).catch(async (e: Error) =>
      assert.fail(`${e.message}: ${(await eventsOf('dra-a')).join(' | ')}\n${node.logTail('kubelet', 20)}`),
    );
    console.log(`# pod with a claim: created to Running in ${Date.now() - startedAt} ms`);
    const [file] = claimFiles();
    assert.ok(file, 'a prepared-claim record');
    const record = JSON.parse(readFileSync(join(daemon.stateDir, 'dra', 'claims', file), 'utf8')) as Record<
      string,
      unknown
    >;
    const pod = await node.pod(NS, 'dra-a');
    assert.deepEqual(record.pods, [{ name: 'dra-a', uid: pod.metadata.uid }]);
    assert.deepEqual(record.devices, [
      {
        request: 'nic',
        pool: `${node.nodeName}/${NIC}`,
        device: NICS[0],
        resourceName: NIC,
        kind: 'host-device',
        deviceID: NICS[0],
        network: { namespace: NS, name: 'fast' },
        interfaceName: 'net1',
        ips: ['10.9.0.5/24'],
      },
    ]);
  });

  it("the pod's deletion has the kubelet unprepare the claim: the record goes and the device goes to the next claim", async () => {
    await deletePod('dra-a');
    await until('the prepared record removed', () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
    // The same device (by interface name) for another pod: allocatable again only once the first claim is gone.
    await created(`/api/v1/namespaces/${NS}/pods`, claimingPod('dra-b', 'nic0'));
    await until(
      'pod dra-b Running on the same device',
      async () => ((await phase('dra-b')) === 'Running' ? true : undefined),
      90000,
      200,
    ).catch(async (e: Error) => assert.fail(`${e.message}: ${(await eventsOf('dra-b')).join(' | ')}`));
    assert.equal(claimFiles().length, 1);
    await deletePod('dra-b');
    await until('the second record removed', () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
  });

  it("opaque config that does not parse: the pod does not start, and the kubelet's event names the field", async () => {
    await created(
      `${RESOURCE}/namespaces/${NS}/resourceclaimtemplates`,
      template('bad', NICS[1]!, { network: 'fast', mac: 'not-a-mac' }),
    );
    await created(`/api/v1/namespaces/${NS}/pods`, claimingPod('dra-bad', 'bad'));
    const events = await until(
      'an event naming the bad field',
      async () => {
        const all = await eventsOf('dra-bad');
        return all.some((e) => e.includes('mac: must be a MAC address')) ? all : undefined;
      },
      60000,
      250,
    );
    assert.ok(
      events.some((e) => e.includes('opaque config for plexus.io from the claim')),
      events.join(' | '),
    );
    assert.notEqual(await phase('dra-bad'), 'Running');
    assert.deepEqual(claimFiles(), [], 'nothing recorded for a claim that was refused');
    await deletePod('dra-bad');
  });

  it("plexusd restarted between Prepare and the pod's deletion: the record survives, and the deletion still frees it", async () => {
    await created(`/api/v1/namespaces/${NS}/pods`, claimingPod('dra-c', 'nic0'));
    await until('pod dra-c Running', async () => ((await phase('dra-c')) === 'Running' ? true : undefined), 90000, 200);
    const [before] = claimFiles();
    assert.ok(before);
    await daemon.kill('SIGTERM');
    await daemon.start(30000);
    assert.deepEqual(claimFiles(), [before], 'the record is still there after the restart');
    await until('plexusd registered again', () => (registrations() >= 2 ? true : undefined), 30000, 100);
    await deletePod('dra-c');
    await until(
      'the record removed by the restarted plexusd',
      () => (claimFiles().length === 0 ? true : undefined),
      30000,
      100,
    );
  });

  it("a device that leaves the node leaves the slice (the pool's generation goes up) and comes back with it", async () => {
    const pool = async (): Promise<Slice | undefined> => (await slices()).find((s) => s.spec.driver === 'plexus.io');
    const before = (await pool())!;
    ip('-n', node.netns, 'link', 'del', 'dev', NICS[1]!); // its peer goes with it
    const without = await until(
      'the slice without the device',
      async () => {
        const s = await pool();
        return s && s.spec.devices.length === 1 ? s : undefined;
      },
      30000,
      250,
    );
    assert.deepEqual(
      without.spec.devices.map((d) => d.name),
      [NICS[0]],
    );
    assert.ok(without.spec.pool.generation > before.spec.pool.generation);
    ip('-n', node.netns, 'link', 'add', NICS[1]!, 'type', 'veth', 'peer', 'name', PEERS[1]!);
    const back = await until(
      'the device published again',
      async () => {
        const s = await pool();
        return s && s.spec.devices.length === 2 ? s : undefined;
      },
      30000,
      250,
    );
    assert.deepEqual(
      back.spec.devices.map((d) => d.name),
      NICS,
    );
  });

  it("a restarted kubelet registers plexus.io again, and the node's slice is there after it wiped it", async () => {
    const before = registrations();
    await node.restartKubelet();
    await until('a new registration', () => (registrations() > before ? true : undefined), 60000, 200);
    await until(
      "the node's plexus.io slice",
      async () => ((await slices()).some((s) => s.spec.driver === 'plexus.io') ? true : undefined),
      30000,
      250,
    );
    // And it prepares again: a pod with a claim runs.
    await created(`/api/v1/namespaces/${NS}/pods`, claimingPod('dra-d', 'nic0'));
    await until(
      'pod dra-d Running',
      async () => ((await phase('dra-d')) === 'Running' ? true : undefined),
      90000,
      200,
    ).catch(async (e: Error) => assert.fail(`${e.message}: ${(await eventsOf('dra-d')).join(' | ')}`));
    await deletePod('dra-d');
  });
});
