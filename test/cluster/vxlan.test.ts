/**
 * Issue 38 on the multi-node cluster: one cluster-mode vxlan NAD in the API (no `remotes`, no per-node config) with
 * cluster IPAM; pods the kubelets of three nodes made reach each other (ping and TCP) over it, and every node's VTEP
 * floods exactly to the other nodes' underlay addresses, each node having found them on its peers' Leases.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { clusterMissing, TestCluster } from '../support/cluster/cluster';
import type { ClusterNode } from '../support/cluster/node';
import { ensureNamespace } from '../support/cluster/pods';
import { addressOn, assertTcpExchange, placeOnEveryNode, type PlacedPod } from '../support/cluster/placed';
import { expectedPrerequisites } from '../support/prerequisites';
import { untilTrue } from '../support/until';

const skip = expectedPrerequisites(clusterMissing());
const NS = 'overlay';
const VNI = 4000 + Math.floor(Math.random() * 1000);
const o = 140 + Math.floor(Math.random() * 40);
const OVERLAY = {
  cniVersion: '1.0.0',
  name: 'overlay',
  type: 'vxlan',
  vni: VNI,
  underlayInterface: 'uplink0',
  ipam: { type: 'plexus', ranges: [[{ subnet: `10.${o}.0.0/24` }]], blockSize: { v4: 28 } },
};

/** The remotes of the node's all-zeros entries on the overlay's VTEP, sorted. */
function floodEntries(node: ClusterNode): string[] {
  const out = execFileSync('bridge', ['-n', node.netns, 'fdb', 'show', 'dev', `vx${VNI}`], { encoding: 'utf8' });
  return [...out.matchAll(/^00:00:00:00:00:00 dst (\S+) /gm)].map((m) => m[1] ?? '').sort();
}

describe('one cluster-mode vxlan network across the nodes of a real cluster', { skip }, () => {
  let cluster: TestCluster | undefined;
  let placed: PlacedPod[] = [];

  before(async () => {
    cluster = await TestCluster.start();
    const api = cluster.api;
    await ensureNamespace(api, NS);
    const r = await api.createNad(NS, 'overlay', JSON.stringify(OVERLAY));
    assert.equal(r.status, 201, JSON.stringify(r.body));
    placed = await placeOnEveryNode(cluster, NS, 'v', 'overlay');
  });
  after(async () => {
    const problems = (await cluster?.stop()) ?? [];
    assert.deepEqual(problems, []);
  });

  const address = (p: PlacedPod): string => addressOn(p, `${NS}/overlay`);

  it('every node floods to the underlay addresses of the other nodes, and only to them', async () => {
    const nodes = cluster!.nodes;
    const want = (n: ClusterNode): string[] =>
      nodes
        .filter((x) => x !== n)
        .map((x) => x.address)
        .sort();
    const started = Date.now();
    const entries = (): string => nodes.map((n) => `${n.name}: [${floodEntries(n).join(' ')}]`).join('; ');
    await untilTrue(
      'every node flooding to the others',
      () => nodes.every((n) => JSON.stringify(floodEntries(n)) === JSON.stringify(want(n))),
      30000,
      200,
    ).catch((e: Error) => assert.fail(`${e.message}: ${entries()}`));
    console.log(`flood entries on every node ${(Date.now() - started) / 1000} s after the pods ran`);
  });

  it('every pod pings the pods of the other nodes over the overlay', () => {
    const failed = placed.flatMap((from) =>
      placed
        .filter((to) => to.node !== from.node)
        .map((to) => ({
          what: `${from.node.name} → ${address(to)}`,
          r: from.node.inPod(from.netns, ['ping', '-c', '2', '-W', '2', address(to)]),
        }))
        .filter(({ r }) => r.status !== 0)
        .map(({ what, r }) => `${what}: ${r.out}`),
    );
    assert.deepEqual(failed, []);
  });

  it('a TCP exchange between pods of two nodes over the overlay', async () => {
    const [a, b] = placed as [PlacedPod, PlacedPod];
    await assertTcpExchange(a, b, address(b), 7008);
  });
});
