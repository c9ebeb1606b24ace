/**
 * Proof 1 of issue 37 on the multi-node cluster: pods the kubelets of different nodes made reach each other (ping and
 * a TCP exchange) over a secondary network that spans nodes, with addresses from cluster IPAM, one NAD for the whole
 * cluster: macvlan on each node's uplink, and a bridge whose port is the node's second uplink. Proof 6: a running
 * pod hot-plugged onto the macvlan network reaches that network's pods on another node. A macvlan network on a
 * master that does not leave the node (its own pod bridge) is the control: the same pods then cannot reach each other.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { clusterMissing, TestCluster } from '../support/cluster/cluster';
import { addressesOn, createPod, ensureNamespace, listPods, NETWORKS, waitRunning } from '../support/cluster/pods';
import { ip } from '../support/netns';
import { addressOn, assertTcpExchange, placeOnEveryNode, type PlacedPod } from '../support/cluster/placed';
import { expectedPrerequisites } from '../support/prerequisites';
import { until } from '../support/until';

const skip = expectedPrerequisites(clusterMissing());
const NS = 'dataplane';
const random = (n: number): number => Math.floor(Math.random() * n);
const o = 100 + random(40);
const t = random(200);
const plexusIpam = (third: number): Record<string, unknown> => ({
  type: 'plexus',
  ranges: [[{ subnet: `10.${o}.${third}.0/24` }]],
  blockSize: { v4: 28 },
});
const NADS: Record<string, Record<string, unknown>> = {
  lan: { type: 'macvlan', master: 'uplink0', mode: 'bridge', ipam: plexusIpam(t) },
  l2: { type: 'bridge', bridge: 'lanbr0', isGateway: false, ipam: plexusIpam(t + 1) },
  // The control: a master that stays inside its node.
  island: { type: 'macvlan', master: 'cni0', mode: 'bridge', ipam: plexusIpam(t + 2) },
};

describe('pods on different nodes reach each other over networks that span nodes', { skip }, () => {
  let cluster: TestCluster | undefined;
  let placed: PlacedPod[] = [];

  before(async () => {
    cluster = await TestCluster.start();
    const api = cluster.api;
    await ensureNamespace(api, NS);
    for (const [name, config] of Object.entries(NADS)) {
      const r = await api.createNad(NS, name, JSON.stringify({ cniVersion: '1.0.0', name, ...config }));
      assert.equal(r.status, 201, JSON.stringify(r.body));
    }
    // The operator's bridge: the node's second uplink is its port, so the bridge reaches the other nodes.
    for (const n of cluster.nodes) {
      ip('-n', n.netns, 'link', 'add', 'lanbr0', 'type', 'bridge');
      ip('-n', n.netns, 'link', 'set', 'uplink1', 'master', 'lanbr0');
      ip('-n', n.netns, 'link', 'set', 'lanbr0', 'up');
    }
    placed = await placeOnEveryNode(cluster, NS, 'p', 'lan,l2,island');
  });
  after(async () => {
    const problems = (await cluster?.stop()) ?? [];
    assert.deepEqual(problems, []);
  });

  const address = (p: PlacedPod, network: string): string => addressOn(p, `${NS}/${network}`);
  const ping = (from: PlacedPod, to: string): { status: number | null; out: string } =>
    from.node.inPod(from.netns, ['ping', '-c', '2', '-W', '2', to]);

  it('each pod has one address per network, from the one cluster pool, distinct across the nodes, as its netns shows', () => {
    for (const network of Object.keys(NADS)) {
      const all = placed.map((p) => address(p, network));
      assert.equal(new Set(all).size, all.length, `${network}: ${all.join(' ')}`);
      for (const [i, p] of placed.entries()) {
        assert.ok(all[i]!.startsWith(`10.${o}.`), all[i]);
        const inside = p.node.inPod(p.netns, ['ip', '-o', '-4', 'addr']).out;
        assert.ok(inside.includes(`inet ${all[i]}/24`), `${p.pod.metadata.name} on ${network}: ${inside}`);
      }
    }
  });

  for (const network of ['lan', 'l2']) {
    it(`every pod pings the pods of the other nodes over ${network}`, () => {
      const failed = placed.flatMap((from) =>
        placed
          .filter((to) => to.node !== from.node)
          .map((to) => ({ from, to: address(to, network) }))
          .map(({ from, to }) => ({ what: `${from.node.name} → ${to}`, r: ping(from, to) }))
          .filter(({ r }) => r.status !== 0)
          .map(({ what, r }) => `${what}: ${r.out}`),
      );
      assert.deepEqual(failed, []);
    });

    it(`a TCP exchange between pods of two nodes over ${network}`, async () => {
      const [a, b] = placed as [PlacedPod, PlacedPod];
      await assertTcpExchange(a, b, address(b, network), 7007);
    });
  }

  it('hot-plug: a running pod on one node added to lan reaches the lan pods of the other nodes', async () => {
    const c = cluster!;
    const [, b] = placed as [PlacedPod, PlacedPod];
    const home = c.nodes.find((n) => n !== b.node)!;
    await createPod(c.api, NS, 'hotplug', { nodeName: home.name });
    await waitRunning(c.api, NS, ['hotplug']);
    const patched = await c.api.request(
      'PATCH',
      `/api/v1/namespaces/${NS}/pods/hotplug`,
      { metadata: { annotations: { [NETWORKS]: 'lan' } } },
      'application/merge-patch+json',
    );
    assert.equal(patched.status, 200);
    const pod = await until(
      'the hot-plugged network in the network-status',
      async () =>
        (await listPods(c.api, NS)).find((p) => p.metadata.name === 'hotplug' && addressesOn(p, `${NS}/lan`).length),
      60000,
      250,
    );
    const me = { node: home, pod, netns: await home.podNetns(NS, 'hotplug') };
    const r = ping(me, address(b, 'lan'));
    assert.equal(r.status, 0, `${home.name} → ${b.node.name} over the hot-plugged lan: ${r.out}`);
  });

  it('the control: on a macvlan whose master stays inside its node, the same pods do not reach each other', () => {
    const [a, b] = placed as [PlacedPod, PlacedPod];
    const r = ping(a, address(b, 'island'));
    assert.notEqual(r.status, 0, `a ping across nodes over the node-local master got through: ${r.out}`);
  });
});
