/**
 * Proof 2 of issue 37: cluster IPAM under real kubelets. A burst of pods on every node at once gets no address twice
 * (network-status and the pods' own namespaces agree). Then a node dies while its ReplicaSet pods hold addresses of a
 * small pool whose every other address is in use: every process of it killed, as a machine dies, and its Node object
 * deleted, as an autoscaler would. The ReplicaSet's replacements on the other nodes wait: none gets one of the dead
 * node's addresses before its Lease has expired plus the grace; after that they do. The node then comes back under
 * the same name, its disks kept, and recovers: its dead pods' leases go, and no address is held twice anywhere.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { clusterMissing, TestCluster } from '../support/cluster/cluster';
import type { ClusterNode } from '../support/cluster/node';
import {
  awaitReuse,
  duplicates,
  holdWholePool,
  ipBlocks,
  killNode,
  macvlanPoolNad,
  type ScarcePool,
  usableIn,
} from '../support/cluster/node-death';
import {
  addressesOn,
  createPod,
  ensureNamespace,
  labelNode,
  listPods,
  NETWORKS,
  waitRunning,
} from '../support/cluster/pods';
import { expectedPrerequisites } from '../support/prerequisites';
import { until } from '../support/until';

const skip = expectedPrerequisites(clusterMissing());
const NS = 'ipam';
const LEASE_SECONDS = 4;
/** Longer than the kubelet's retry of a failed sandbox (10-15 s), so a reuse that ignores it shows. */
const GRACE_SECONDS = 20;
const PODS_PER_NODE = 8;
const REPLICAS = 4;
/** The label that lets the scarce ReplicaSet's pods onto a node. */
const SCARCE_NODE = 'plexus.test/scarce';
const o = 100 + Math.floor(Math.random() * 40);
const t = Math.floor(Math.random() * 200);
const WIDE = `10.${o}.${t}.0/24`;
/** 13 usable addresses (.2 to .14) in four /30 blocks. */
const SCARCE = `10.${o}.${t + 1}.0/28`;
const POOL_SIZE = usableIn(SCARCE, SCARCE);
const SCARCE_POOL: ScarcePool = {
  namespace: NS,
  network: 'scarce',
  subnet: SCARCE,
  replicas: REPLICAS,
  nodeLabel: SCARCE_NODE,
};
/** The addresses a node's plexusd leases in a cluster pool (its state directory's files). */
const leasesOn = (node: ClusterNode, pool: string): string[] => {
  try {
    return readdirSync(join(node.paths.plexusState, 'ipam-pools', pool)).filter((f) => /^\d+\.\d+\.\d+\.\d+$/.test(f));
  } catch {
    return [];
  }
};

describe('cluster IPAM under real kubelets', { skip }, () => {
  let cluster: TestCluster | undefined;
  /** The node the second test kills and the third brings back. */
  let dead: ClusterNode | undefined;

  before(async () => {
    cluster = await TestCluster.start({
      timing: {
        nodeLeaseSeconds: LEASE_SECONDS,
        ipamNodeGraceSeconds: GRACE_SECONDS,
        ipamReconcileSeconds: 1,
        orphanSweepSeconds: 5,
      },
    });
    await ensureNamespace(cluster.api, NS);
    for (const [name, subnet, block] of [
      ['wide', WIDE, 28],
      ['scarce', SCARCE, 30],
    ] as const)
      assert.equal((await cluster.api.createNad(NS, name, macvlanPoolNad(name, subnet, block))).status, 201);
  });
  after(async () => {
    assert.deepEqual((await cluster?.stop()) ?? [], []);
  });

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
    const claimed = await ipBlocks(c.api, 'wide');
    console.log(
      `burst: ${fromStatus.length} addresses, ${claimed.length} blocks claimed (API writes per address ${(claimed.length / fromStatus.length).toFixed(3)})`,
    );
    const r = await c.api.request('DELETE', `/api/v1/namespaces/${NS}/pods?labelSelector=`);
    assert.equal(r.status, 200);
  });

  it("a dead node's addresses go to the ReplicaSet's replacements only after its Lease expired plus the grace", async () => {
    const c = cluster!;
    const api = c.api;
    // The victim's pods die with it, the holder's fill the rest of the pool, the heir gets the replacements.
    const [victim, holder, heir] = c.nodes as [ClusterNode, ClusterNode, ClusterNode];
    dead = victim;
    // The ReplicaSet's pods all land on the victim: its blocks then hold only their addresses.
    const { first, deadBlocks, spare, held } = await holdWholePool(api, SCARCE_POOL, { victim, holder });
    assert.equal(held.length, 4, `every block of the pool is held: ${JSON.stringify(held.map((b) => b.spec))}`);

    await labelNode(api, heir.name, SCARCE_NODE, 'yes');
    const diedAt = await killNode(api, { victim, namespace: NS, pods: first.map((a) => a.pod) });
    const earliest = diedAt + (GRACE_SECONDS + (LEASE_SECONDS * 2) / 3) * 1000;
    const replaced = await awaitReuse(api, SCARCE_POOL, { victim, deadBlocks }, ({ replacements, reused }) => {
      const [early] = Date.now() < earliest ? reused : [];
      if (early)
        assert.fail(
          `${early.pod.metadata.name} on ${early.pod.spec.nodeName} got ${early.address} of the dead node ` +
            `${(Date.now() - diedAt) / 1000} s after its death, before its Lease (${LEASE_SECONDS} s) and the ` +
            `grace (${GRACE_SECONDS} s) had passed`,
        );
      assert.deepEqual(
        replacements.filter((x) => !reused.includes(x)),
        [],
        'a replacement got an address outside the dead blocks',
      );
    });
    console.log(
      `the dead node's addresses were reused ${((replaced.at - diedAt) / 1000).toFixed(1)} s after its death`,
    );
    const all = (await listPods(api, NS)).flatMap((p) => addressesOn(p, `${NS}/scarce`));
    assert.equal(all.length, POOL_SIZE - spare);
    assert.deepEqual(duplicates(all), []);
  });

  it("the dead node comes back under its name: its dead pods' leases go, and no address is held twice anywhere", async () => {
    const c = cluster!;
    assert.ok(dead, 'the previous test killed a node');
    const back = dead;
    await back.boot();
    await c.waitNodeReady(back.name);
    const stale = await until(
      `${back.name}'s leases of the scarce pool released (its pods died with it)`,
      () => (leasesOn(back, 'scarce').length === 0 ? [] : undefined),
      120000,
      1000,
    ).catch((e: Error) => [`${e.message}: still ${leasesOn(back, 'scarce').join(' ')}`]);
    assert.deepEqual(stale, []);
    await createPod(c.api, NS, 'back', { nodeName: back.name, annotations: { [NETWORKS]: 'wide' } });
    await waitRunning(c.api, NS, ['back']);
    const pods = await listPods(c.api, NS);
    for (const network of ['wide', 'scarce']) {
      const all = pods.flatMap((p) => addressesOn(p, `${NS}/${network}`));
      const leased = c.nodes.flatMap((n) => leasesOn(n, network));
      assert.deepEqual(duplicates(all), [], `${network}: an address twice in network-status`);
      assert.deepEqual(duplicates(leased), [], `${network}: an address leased on two nodes`);
    }
    const scarce = await ipBlocks(c.api, 'scarce');
    assert.deepEqual(duplicates(scarce.map((b) => b.spec.cidr)), []);
    assert.ok(
      scarce.every((b) => b.spec.node !== back.name),
      `${back.name} holds none of the reused blocks`,
    );
  });
});
