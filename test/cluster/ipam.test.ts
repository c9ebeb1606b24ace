/**
 * Proof 2 of issue 37, its first half: cluster IPAM under real kubelets. A burst of pods on every node at once gets no
 * address twice (network-status and the pods' own namespaces agree), with the API writes per address it cost. The
 * second half (a node dying while it holds addresses, its blocks reused only after its Lease and the grace) is not
 * here yet.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { clusterMissing, TestCluster } from '../support/cluster/cluster';
import { addressesOn, createPod, ensureNamespace, NETWORKS, waitRunning } from '../support/cluster/pods';
import { expectedPrerequisites } from '../support/prerequisites';

const skip = expectedPrerequisites(clusterMissing());
const NS = 'ipam';
const LEASE_SECONDS = 4;
const GRACE_SECONDS = 10;
const PODS_PER_NODE = 8;
const o = 100 + Math.floor(Math.random() * 40);
const t = Math.floor(Math.random() * 200);
const WIDE = `10.${o}.${t}.0/24`;
const nad = (name: string, subnet: string, block: number): string =>
  JSON.stringify({
    cniVersion: '1.0.0',
    name,
    type: 'macvlan',
    master: 'uplink0',
    mode: 'bridge',
    ipam: { type: 'plexus', ranges: [[{ subnet }]], blockSize: { v4: block } },
  });

interface Block {
  spec: { pool: string; cidr: string; node: string };
}
const duplicates = (all: readonly string[]): string[] => all.filter((a, i) => all.indexOf(a) !== i);

describe('cluster IPAM under real kubelets', { skip }, () => {
  let cluster: TestCluster | undefined;

  before(async () => {
    cluster = await TestCluster.start({
      timing: { nodeLeaseSeconds: LEASE_SECONDS, ipamNodeGraceSeconds: GRACE_SECONDS, ipamReconcileSeconds: 1 },
    });
    await ensureNamespace(cluster.api, NS);
    assert.equal((await cluster.api.createNad(NS, 'wide', nad('wide', WIDE, 28))).status, 201);
  });
  after(async () => {
    assert.deepEqual((await cluster?.stop()) ?? [], []);
  });

  const blocks = async (pool: string): Promise<Block[]> =>
    (
      (await cluster!.api.request('GET', '/apis/ipam.plexus.io/v1alpha1/ipblocks')).body as { items: Block[] }
    ).items.filter((b) => b.spec.pool === pool);

  it(`a burst of ${PODS_PER_NODE} pods on each node at once: no address twice, in network-status or in the pods`, async () => {
    const c = cluster!;
    const names = c.nodes.flatMap((n) =>
      Array.from({ length: PODS_PER_NODE }, (_, i) => ({ n, name: `b-${n.name}-${i}` })),
    );
    await Promise.all(
      names.map(({ n, name }) => createPod(c.api, NS, name, { nodeName: n.name, annotations: { [NETWORKS]: 'wide' } })),
    );
    const pods = await waitRunning(
      c.api,
      NS,
      names.map((x) => x.name),
      180000,
    );
    const fromStatus = pods.flatMap((p) => addressesOn(p, `${NS}/wide`));
    assert.equal(fromStatus.length, names.length);
    assert.deepEqual(duplicates(fromStatus), []);
    const inside = await Promise.all(
      names.map(async ({ n, name }) => {
        const out = n.inPod(await n.podNetns(NS, name), ['ip', '-o', '-4', 'addr', 'show', 'net1']).out;
        return /inet (\S+)\//.exec(out)?.[1] ?? `none in ${name}`;
      }),
    );
    assert.deepEqual(duplicates(inside), []);
    assert.deepEqual([...inside].sort(), [...fromStatus].sort());
    const claimed = await blocks('wide');
    console.log(
      `burst: ${fromStatus.length} addresses, ${claimed.length} blocks claimed (API writes per address ${(claimed.length / fromStatus.length).toFixed(3)})`,
    );
    const r = await c.api.request('DELETE', `/api/v1/namespaces/${NS}/pods?labelSelector=`);
    assert.equal(r.status, 200);
  });
});
