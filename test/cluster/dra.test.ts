/**
 * Proof 5 of issue 37: DRA across nodes. Every node's plexusd runs with --dra and the same resources file (a host
 * device `fastnic0` of resource plexus.io/fastnic); the test makes that device, a veth, inside one node's network
 * namespace at a time. Each node publishes its own ResourceSlice with what it has; the scheduler puts a claiming pod on
 * the node with a free device and keeps a second one waiting until the device is free again; a device deleted from its
 * node leaves that node's slice, and one made on another node takes the next pod there.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { clusterMissing, TestCluster } from '../support/cluster/cluster';
import type { ClusterNode } from '../support/cluster/node';
import { ensureNamespace, listPods, type ApiPod } from '../support/cluster/pods';
import {
  type ApiCaller,
  claimingPod,
  create,
  draTooOld,
  hostDeviceTemplate,
  installDra,
  RESOURCE_API,
} from '../support/dra-node';
import { ip, ipTry } from '../support/netns';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';
import { until } from '../support/until';

const missing = clusterMissing();
const skip = expectedPrerequisites(missing) || optionalSkip(missing ? undefined : draTooOld());
const NS = 'dra';
const DEVICE = 'fastnic0';
const PEER = 'fastpeer0';
const RESOURCE = 'plexus.io/fastnic';
const ADDRESS = `10.${100 + Math.floor(Math.random() * 40)}.${Math.floor(Math.random() * 200)}.5/24`;

interface Slice {
  spec: { driver: string; nodeName?: string; devices?: { name: string }[] };
}
type PodWithStatus = ApiPod & { status?: { phase?: string; conditions?: { type: string; status: string }[] } };

describe('DRA across nodes: slices per node, pods where the device is', { skip }, () => {
  let cluster: TestCluster | undefined;
  let work = '';

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'plexus-cluster-dra-'));
    const resources = join(work, 'resources.yaml');
    writeFileSync(
      resources,
      JSON.stringify({ resources: [{ name: RESOURCE, kind: 'host-device', devices: [DEVICE], offer: ['dra'] }] }),
    );
    cluster = await TestCluster.start({
      beforeNodes: (k8s) => installDra({ call: (...args) => k8s.request(...args) }),
      settings: (node) => ({
        dra: true,
        devicePluginConfig: resources,
        deviceInfoDir: join(node.root, 'run', 'devinfo'),
        logLevel: 'info',
      }),
    });
    await ensureNamespace(cluster.api, NS);
    const nad = { cniVersion: '1.0.0', name: 'fast', type: 'host-device', capabilities: { ips: true } };
    const made = await cluster.api.createNad(NS, 'fast', JSON.stringify({ ...nad, ipam: { type: 'static' } }));
    assert.equal(made.status, 201);
    const cel = `device.attributes["k8s.cni.cncf.io"].resourceName == "${RESOURCE}"`;
    const parameters = { network: 'fast', interfaceName: 'net1', ips: [ADDRESS] };
    await create(api(), hostDeviceTemplate(NS, 'fast-nic', cel, parameters));
  });
  after(async () => {
    try {
      for (const n of cluster?.nodes ?? []) ipTry('-n', n.netns, 'link', 'del', DEVICE);
      assert.deepEqual((await cluster?.stop()) ?? [], []);
    } finally {
      if (work) rmSync(work, { recursive: true, force: true });
    }
  });

  const api = (): ApiCaller => ({ call: (...args) => cluster!.api.request(...args) });
  /** Each node's plexus.io devices, as its ResourceSlices publish them. */
  const published = async (): Promise<Record<string, string[]>> => {
    const r = await cluster!.api.request('GET', `${RESOURCE_API}/resourceslices`);
    const slices = ((r.body as { items?: Slice[] }).items ?? []).filter((s) => s.spec.driver === 'plexus.io');
    const byNode: Record<string, string[]> = Object.fromEntries(cluster!.nodes.map((n) => [n.name, []]));
    for (const s of slices) byNode[s.spec.nodeName ?? '?']?.push(...(s.spec.devices ?? []).map((d) => d.name));
    return byNode;
  };
  const expectPublished = (what: string, want: (n: ClusterNode) => string[]): Promise<Record<string, string[]>> => {
    const expected = Object.fromEntries(cluster!.nodes.map((n) => [n.name, want(n)]));
    let last: Record<string, string[]> = {};
    return until(
      what,
      async () => {
        last = await published();
        return JSON.stringify(last) === JSON.stringify(expected) ? last : undefined;
      },
      30000,
      250,
    ).catch((e: Error) => assert.fail(`${e.message}: ${JSON.stringify(last)}, expected ${JSON.stringify(expected)}`));
  };
  const addDevice = (n: ClusterNode): void => {
    ip('-n', n.netns, 'link', 'add', DEVICE, 'type', 'veth', 'peer', 'name', PEER);
    ip('-n', n.netns, 'link', 'set', PEER, 'up');
    ip('-n', n.netns, 'link', 'set', DEVICE, 'up');
  };
  const podNamed = async (name: string): Promise<PodWithStatus | undefined> =>
    (await listPods(cluster!.api, NS)).find((p) => p.metadata.name === name);
  const runningOn = (name: string): Promise<string> =>
    until(
      `pod ${name} Running`,
      async () => {
        const p = await podNamed(name);
        return p?.status?.phase === 'Running' ? p.spec.nodeName : undefined;
      },
      120000,
      250,
    );
  const deletePod = async (name: string): Promise<void> => {
    await cluster!.api.request('DELETE', `/api/v1/namespaces/${NS}/pods/${name}`);
    await until(`pod ${name} gone`, async () => ((await podNamed(name)) ? undefined : true), 60000, 250);
  };

  it('each node publishes its own slice: the node with the device offers it, the others nothing', async () => {
    const [, holder] = cluster!.nodes as [ClusterNode, ClusterNode];
    addDevice(holder);
    await expectPublished(`${DEVICE} published on ${holder.name} only`, (n) => (n === holder ? [DEVICE] : []));
  });

  it("the scheduler puts a claim's pod on the node with the free device, and a second waits for it", async () => {
    const c = cluster!;
    const [, holder] = c.nodes as [ClusterNode, ClusterNode];
    await create(api(), claimingPod(NS, 'first', { template: 'fast-nic' }));
    assert.equal(await runningOn('first'), holder.name);
    const inside = holder.inPod(await holder.podNetns(NS, 'first'), ['ip', '-o', 'addr', 'show', 'dev', 'net1']);
    assert.ok(inside.out.includes(`inet ${ADDRESS}`), `the device is net1 in the pod: ${inside.out}`);
    await create(api(), claimingPod(NS, 'second', { template: 'fast-nic' }));
    const waiting = await until(
      'the second pod found unschedulable',
      async () => {
        const p = await podNamed('second');
        const scheduled = p?.status?.conditions?.find((x) => x.type === 'PodScheduled');
        return scheduled?.status === 'False' ? p : undefined;
      },
      30000,
      250,
    );
    assert.equal(waiting.spec.nodeName, undefined, 'the second pod is on no node while the device is taken');
    await deletePod('first');
    assert.equal(await runningOn('second'), holder.name, 'the freed device takes the waiting pod');
    await deletePod('second');
  });

  it("a device deleted from its node leaves that node's slice; one made on another node takes the next pod there", async () => {
    const c = cluster!;
    const [, holder, other] = c.nodes as [ClusterNode, ClusterNode, ClusterNode];
    await until(
      'the device back on its node',
      () => (ipTry('-n', holder.netns, 'link', 'show', DEVICE).status === 0 ? true : undefined),
      30000,
      250,
    );
    ip('-n', holder.netns, 'link', 'del', DEVICE);
    await expectPublished(`${DEVICE} gone from ${holder.name}'s slice`, () => []);
    addDevice(other);
    await expectPublished(`${DEVICE} published on ${other.name} only`, (n) => (n === other ? [DEVICE] : []));
    await create(api(), claimingPod(NS, 'third', { template: 'fast-nic' }));
    assert.equal(await runningOn('third'), other.name);
    await deletePod('third');
  });
});
