/**
 * One cluster-mode vxlan network (docs/drivers.md, "Cluster mode") across three simulated nodes: each a network
 * namespace with its own plexusd (simulated-node.ts), their `uplink0` on one switch (a bridge in a namespace of its own),
 * the API server a real kube-apiserver + etcd. One NAD, the same for every node; each node publishes its VTEP on its
 * Lease and floods to the live peers that serve the network: checked on every node's VTEP after the pods' ADDs, after a
 * plexusd restart, after a node's plexusd dies (SIGKILL: its Lease expires), and after the network is deleted.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ApiPods } from '../support/api-pods';
import { podMaker, type ShimOutput } from '../support/daemon';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { ip, NetnsFixture, uniquePrefix } from '../support/netns';
import { Relay } from '../support/relay';
import { SimulatedNode, runEveryStep } from '../support/simulated-node';
import { expectedPrerequisites } from '../support/prerequisites';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('pxv');
const VNI = 4242;
const DEVICE = `vx${VNI}`;
const LEASE_SECONDS = 3;
const OVERLAY = {
  cniVersion: '1.0.0',
  name: 'overlay',
  type: 'vxlan',
  vni: VNI,
  underlayInterface: 'uplink0',
  ipam: { type: 'plexus', ranges: [[{ subnet: '10.40.0.0/24' }]], blockSize: { v4: 28 } },
};
const UNDERLAY = ['192.168.247.1', '192.168.247.2', '192.168.247.3'];

/** The remotes of a node's all-zeros entries on the overlay's VTEP, sorted; [] when the VTEP is not there. */
function floodEntries(node: SimulatedNode): string[] {
  let out: string;
  try {
    out = execFileSync('bridge', ['-n', node.netns.name, 'fdb', 'show', 'dev', DEVICE], { encoding: 'utf8' });
  } catch {
    return [];
  }
  return [...out.matchAll(/^00:00:00:00:00:00 dst (\S+) /gm)].map((m) => m[1] ?? '').sort();
}

/** Seconds until `check` holds (polled every 100 ms), or a failure naming `what` after `timeoutMs`. */
async function secondsUntil(what: () => string, check: () => boolean, timeoutMs = 30000): Promise<number> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > timeoutMs) throw new Error(`not within ${timeoutMs / 1000} s: ${what()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return (Date.now() - started) / 1000;
}

describe('one cluster-mode vxlan network across three simulated nodes', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  const newPod = podMaker(fx, prefix, []);
  let dir = '';
  let api: KubeApiFixture | undefined;
  let hostRelay: Relay | undefined;
  const nodes: SimulatedNode[] = [];
  const address = new Map<SimulatedNode, string>();
  const podAddress = new Map<SimulatedNode, { ns: string; ip: string }>();
  let kubeconfig = '';

  /** Every node's entries equal the other live nodes' underlay addresses. */
  const converged = (live: readonly SimulatedNode[]) => (): boolean =>
    live.every(
      (n) =>
        JSON.stringify(floodEntries(n)) ===
        JSON.stringify(
          live
            .filter((o) => o !== n)
            .map((o) => address.get(o))
            .sort(),
        ),
    );
  const entries = (): string => nodes.map((n) => `${n.nodeName}: [${floodEntries(n).join(' ')}]`).join('; ');

  const startNode = async (i: number, netns = fx.create(`n${i}`)): Promise<SimulatedNode> =>
    SimulatedNode.start({
      netns,
      nodeName: `${prefix}-node-${i}`,
      apiSocket: join(dir, 'api.sock'),
      kubeconfig,
      defaultNetwork: 'overlay',
      settings: { nodeLeaseSeconds: LEASE_SECONDS },
    });

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'plexus-vxlan-peers-'));
    const sw = fx.create('sw');
    ip('-n', sw.name, 'link', 'add', 'br0', 'type', 'bridge');
    ip('-n', sw.name, 'link', 'set', 'br0', 'up');
    api = await KubeApiFixture.startForPlexus();
    assert.equal((await api.createNad('default', 'overlay', JSON.stringify(OVERLAY))).status, 201);
    hostRelay = await Relay.start({ path: join(dir, 'api.sock') }, { host: '127.0.0.1', port: api.apiPort });
    kubeconfig = api.userKubeconfig('plexus');
    for (const [i, underlay] of UNDERLAY.entries()) {
      const ns = fx.create(`n${i}`);
      // The node's wire to the switch, made inside the namespaces: no link ever exists on the host.
      ip('-n', sw.name, 'link', 'add', `p${i}`, 'type', 'veth', 'peer', 'name', 'uplink0', 'netns', ns.name);
      ip('-n', sw.name, 'link', 'set', `p${i}`, 'master', 'br0', 'up');
      ip('-n', ns.name, 'addr', 'add', `${underlay}/24`, 'dev', 'uplink0');
      ip('-n', ns.name, 'link', 'set', 'uplink0', 'up');
      await api.createNode(`${prefix}-node-${i}`);
      const node = await startNode(i, ns);
      nodes.push(node);
      address.set(node, underlay);
    }
  });
  after(async () => {
    const steps = [
      ...nodes.map((n) => () => n.stop()),
      () => hostRelay?.stop(),
      () => api?.stop(),
      () => fx.cleanup(),
      () => dir && rmSync(dir, { recursive: true, force: true }),
    ];
    await runEveryStep(steps);
  });

  const add = async (node: SimulatedNode, name: string): Promise<ShimOutput> => {
    const pod = await new ApiPods(api!, node.nodeName, newPod).create(name, {});
    const out = await node.daemon.cni({
      command: 'ADD',
      containerId: pod.pod.cid,
      netns: pod.pod.netns,
      ifname: 'eth0',
      args: pod.args,
      config: node.daemon.runtimeConfig({}, '1.0.0'),
    });
    const result = out.json as { ips?: { address: string }[] } | undefined;
    const ipOf = result?.ips?.[0]?.address.split('/')[0];
    if (ipOf) podAddress.set(node, { ns: pod.pod.ns, ip: ipOf });
    return out;
  };

  it('a pod on each node: every node floods to the two others, and the pods reach each other', async () => {
    const started = Date.now();
    for (const [i, node] of nodes.entries()) {
      const out = await add(node, `p${i}`);
      assert.equal(out.code, 0, out.stdout);
    }
    const seconds = await secondsUntil(entries, converged(nodes));
    console.log(
      `flood entries on every node ${seconds.toFixed(1)} s after the last ADD (${(Date.now() - started) / 1000} s after the first)`,
    );
    const [a, b, c] = nodes.map((n) => podAddress.get(n)!);
    for (const [from, to] of [
      [a, b],
      [a, c],
      [b, c],
    ] as const) {
      const ping = execFileSync('ip', ['netns', 'exec', from!.ns, 'ping', '-c', '1', '-W', '2', to!.ip], {
        encoding: 'utf8',
      });
      assert.match(ping, / 0% packet loss/);
    }
  });

  it('after a plexusd restart the entries still equal the live peers', async () => {
    const node = nodes[1]!;
    await node.daemon.kill('SIGTERM');
    await node.daemon.start(60000);
    const seconds = await secondsUntil(entries, converged(nodes));
    console.log(`entries equal the live peers ${seconds.toFixed(1)} s after the restarted plexusd was ready`);
  });

  it('a node whose plexusd dies loses its entry on every other node once its Lease expires', async () => {
    const dead = nodes[2]!;
    await dead.daemon.kill('SIGKILL');
    const live = nodes.filter((n) => n !== dead);
    const seconds = await secondsUntil(
      () => live.map((n) => `${n.nodeName}: [${floodEntries(n).join(' ')}]`).join('; '),
      converged(live),
    );
    console.log(
      `the dead node's entry gone ${seconds.toFixed(1)} s after its plexusd was killed (lease ${LEASE_SECONDS} s)`,
    );
    const [a, b] = live.map((n) => podAddress.get(n)!);
    const ping = execFileSync('ip', ['netns', 'exec', a!.ns, 'ping', '-c', '1', '-W', '2', b!.ip], {
      encoding: 'utf8',
    });
    assert.match(ping, / 0% packet loss/, 'traffic among the others goes on');
  });

  it('the network deleted: its VTEPs flood to no one', async () => {
    const r = await api!.request(
      'DELETE',
      '/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/overlay',
    );
    assert.equal(r.status, 200);
    const live = nodes.slice(0, 2);
    await secondsUntil(entries, () => live.every((n) => floodEntries(n).length === 0));
    const publishing = async (): Promise<string[]> => {
      const r = await api!.request('GET', '/apis/coordination.k8s.io/v1/leases');
      const items = (r.body as { items?: { metadata: { name: string; annotations?: Record<string, string> } }[] })
        .items;
      return (items ?? [])
        .filter((l) => live.some((n) => l.metadata.name === `plexus-node-${n.nodeName}`))
        .filter((l) => (l.metadata.annotations?.['plexus.io/vteps'] ?? '').includes(`"${VNI}"`))
        .map((l) => `${l.metadata.name}: ${l.metadata.annotations?.['plexus.io/vteps']}`);
    };
    const deadline = Date.now() + 10000;
    while ((await publishing()).length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(await publishing(), [], 'the running nodes publish the deleted network no more');
  });
});
