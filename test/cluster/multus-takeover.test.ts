/**
 * Proof 4 of issue 37: a two-node cluster running Multus v4.3.0 thick (../shared/multus; support/cluster/multus.ts)
 * moved to Plexus node by node, as docs/migrate-from-multus.md says (plexus-install carrying Multus's settings over,
 * then plexusd with takeOverMultus). One NAD spans the nodes: macvlan on each node's uplink with host-local IPAM, each
 * pod asking for its address in its selection (`ips`), which Multus (CNI_ARGS IP=) and Plexus honour alike:
 * Whereabouts, what a real migration's cluster-wide addresses would use, is not on this machine. While each node moves,
 * a pod on it and a pod on the other node keep pinging; after each move a pod Plexus made on the moved node and a pod
 * Multus made on the other exchange pings and TCP. Multus's daemons then go (its DaemonSet deleted), and deleting the
 * pods Multus made leaves none of their links, leases, network namespaces or Multus/libcni records on any node.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { clusterMissing, TestCluster } from '../support/cluster/cluster';
import { ThickMultus } from '../support/cluster/multus';
import type { ClusterNode } from '../support/cluster/node';
import { boundSource } from '../support/cluster/node-namespaces';
import { addressOn, assertTcpExchange, type PlacedPod } from '../support/cluster/placed';
import { addressesOn, createPod, ensureNamespace, listPods, NETWORKS, waitRunning } from '../support/cluster/pods';
import { getJson } from '../support/daemon';
import { grantMultus, multusMissing } from '../support/multus';
import { ip } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { stopProcess } from '../support/processes';
import { untilPasses } from '../support/until';

const skip = expectedPrerequisites(clusterMissing(), multusMissing());
const NS = 'takeover';
const LAN = `${NS}/lan`;
const net = `10.${100 + Math.floor(Math.random() * 40)}.${Math.floor(Math.random() * 250)}`;
const LAN_CONFIG = JSON.stringify({
  cniVersion: '1.0.0',
  name: 'lan',
  type: 'macvlan',
  master: 'uplink0',
  mode: 'bridge',
  ipam: { type: 'host-local', ranges: [[{ subnet: `${net}.0/24` }]] },
});

/** Directories a node keeps at the hard-coded /var/lib/cni (host-local's leases, Multus's and libcni's caches). */
const varLibCni = (n: ClusterNode, ...sub: string[]): string => join(boundSource(n.spec.root, '/var/lib/cni'), ...sub);
const filesIn = (dir: string): string[] => {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
};

/** A pod on `node` on lan at `<net>.<host>`, once Running with its network-status. */
async function place(cluster: TestCluster, node: ClusterNode, name: string, host: number): Promise<PlacedPod> {
  const networks = JSON.stringify([{ name: 'lan', ips: [`${net}.${host}/24`] }]);
  await createPod(cluster.api, NS, name, { nodeName: node.name, annotations: { [NETWORKS]: networks } });
  const [pod] = await waitRunning(cluster.api, NS, [name]);
  return { node, pod: pod!, netns: await node.podNetns(NS, name) };
}

/** The pods the node's plexusd attached itself, and those Multus made that it adopted, by name. */
async function plexusSees(node: ClusterNode): Promise<{ own: string[]; adopted: string[] }> {
  const names = async (path: string): Promise<string[]> => {
    const r = await getJson(node.paths.plexusSocket, path);
    assert.equal(r.status, 200, `${path} on ${node.name}`);
    return (r.body as { meta?: { pod?: { name?: string } }; pod?: { name?: string } }[]).map(
      (x) => x.meta?.pod?.name ?? x.pod?.name ?? '?',
    );
  };
  return { own: await names('/v1/attachments'), adopted: await names('/v1/adopted') };
}

/** A ping from `from` to `to`, 5 a second until stopped; stopping it (SIGINT) answers its count. */
function keepPinging(from: PlacedPod, to: string): () => Promise<{ sent: number; received: number; out: string }> {
  const ping = from.node.spawnInPod(from.netns, ['ping', '-i', '0.2', '-W', '1', to]);
  let out = '';
  ping.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  // Its summary may come after its exit: 'close' is once its output is read to the end.
  const closed = new Promise<void>((r) => ping.once('close', () => r()));
  return async () => {
    await stopProcess(ping, 'SIGINT', 5000);
    await closed;
    const m = /(\d+) packets transmitted, (\d+) received/.exec(out);
    return { sent: Number(m?.[1] ?? 0), received: Number(m?.[2] ?? 0), out: out.slice(-400) };
  };
}

/** Moves a node as the docs say: plexus-install carries thick Multus's settings over, plexusd takes the node over. */
async function moveToPlexus(node: ClusterNode, multus: ThickMultus): Promise<void> {
  await node.startPlexus({ multusDaemonConfig: multus.config });
  const conf = filesIn(node.paths.cniConfDir);
  assert.ok(!conf.includes('00-multus.conf') && conf.includes('00-multus.conf.plexus-moved'), conf.join(' '));
}

/** Messages of the namespace's events with this reason (a sandbox the kubelet could not make or tear down). */
async function eventsOf(cluster: TestCluster, reason: string): Promise<string[]> {
  const query = `fieldSelector=${encodeURIComponent(`reason=${reason}`)}`;
  const r = await cluster.api.request('GET', `/api/v1/namespaces/${NS}/events?${query}`);
  const items = (r.body as { items?: { involvedObject: { name: string }; message: string }[] }).items ?? [];
  return items.map((e) => `${e.involvedObject.name}: ${e.message.slice(0, 300)}`);
}

describe('Multus thick taken over by Plexus node by node while its pods keep talking', { skip }, () => {
  let cluster: TestCluster | undefined;
  const multus: ThickMultus[] = [];
  /** Multus's pods on node 1 and node 2, then Plexus's. */
  let m1: PlacedPod;
  let m2: PlacedPod;
  let p1: PlacedPod;
  const started = performance.now();

  before(async () => {
    cluster = await TestCluster.start({ nodes: 2, plexusAtStart: false, settings: () => ({ takeOverMultus: true }) });
    await ensureNamespace(cluster.api, NS);
    assert.equal((await cluster.api.createNad(NS, 'lan', LAN_CONFIG)).status, 201);
    const access = await grantMultus(cluster.api);
    for (const n of cluster.nodes) multus.push(await ThickMultus.start(n, access));
  });
  after(async () => {
    const problems = (await cluster?.stop()) ?? [];
    console.log(
      `wall time, the cluster's start and stop included: ${((performance.now() - started) / 1000).toFixed(0)} s`,
    );
    assert.deepEqual(problems, []);
  });

  const n1 = (): ClusterNode => cluster!.nodes[0]!;
  const n2 = (): ClusterNode => cluster!.nodes[1]!;

  it('Multus makes the pods of both nodes, which reach each other over lan', async () => {
    m1 = await place(cluster!, n1(), 'multus-1', 11);
    m2 = await place(cluster!, n2(), 'multus-2', 12);
    for (const n of [n1(), n2()]) {
      const sandboxes = filesIn(varLibCni(n, 'multus')).filter((f) => f !== 'results');
      assert.equal(sandboxes.length, 1, `Multus's cache on ${n.name} has its pod: ${sandboxes.join(' ')}`);
    }
    const r = m1.node.inPod(m1.netns, ['ping', '-c', '2', '-W', '2', addressOn(m2, LAN)]);
    assert.equal(r.status, 0, r.out);
  });

  it('node 1 taken over while its Multus pod pings node 2: no ping lost; Plexus pods there reach Multus pods on node 2', async () => {
    const stop = keepPinging(m2, addressOn(m1, LAN));
    await moveToPlexus(n1(), multus[0]!);
    p1 = await place(cluster!, n1(), 'plexus-1', 21);
    const seen = await plexusSees(n1());
    assert.deepEqual(seen, { own: ['plexus-1'], adopted: ['multus-1'] });
    await assertTcpExchange(p1, m2, addressOn(m2, LAN), 7101);
    const ping = await stop();
    console.log(`pings across node 1's move: ${ping.sent} sent, ${ping.received} answered`);
    // At most the one in flight when it was stopped goes unanswered.
    assert.ok(ping.sent >= 5 && ping.received >= ping.sent - 1, `across node 1's move: ${ping.out}`);
  });

  it("node 2 taken over while node 1's Plexus pod pings its Multus pod: no ping lost; they still exchange TCP", async () => {
    const stop = keepPinging(p1, addressOn(m2, LAN));
    await moveToPlexus(n2(), multus[1]!);
    const p2 = await place(cluster!, n2(), 'plexus-2', 22);
    assert.deepEqual(await plexusSees(n2()), { own: ['plexus-2'], adopted: ['multus-2'] });
    await assertTcpExchange(p1, m2, addressOn(m2, LAN), 7102);
    const r = p2.node.inPod(p2.netns, ['ping', '-c', '2', '-W', '2', addressOn(m1, LAN)]);
    assert.equal(r.status, 0, `Plexus's pod on node 2 → Multus's on node 1: ${r.out}`);
    const ping = await stop();
    console.log(`pings across node 2's move: ${ping.sent} sent, ${ping.received} answered`);
    // At most the one in flight when it was stopped goes unanswered.
    assert.ok(ping.sent >= 5 && ping.received >= ping.sent - 1, `across node 2's move: ${ping.out}`);
  });

  it("Multus's daemons gone, deleting the pods Multus made leaves nothing of them on any node", async () => {
    const c = cluster!;
    for (const m of multus) await m.stop();
    const pods = [m1, m2];
    /** What each pod had: its addresses (lan, and the node network's eth0), its netns, libcni's records of it. */
    const had = pods.map((p) => ({
      p,
      addresses: [...addressesOn(p.pod, LAN), ...addressesOn(p.pod, 'podnet')],
      netns: p.netns.split('/').pop()!,
      records: filesIn(varLibCni(p.node, 'results')).filter((f) => f.startsWith('multus-cni-network-')),
    }));
    for (const { p, addresses, records } of had) {
      assert.equal(addresses.length, 2, `${p.pod.metadata.name}: ${addresses.join(' ')}`);
      assert.equal(records.length, 1, `libcni's record of the call to Multus on ${p.node.name}`);
    }
    for (const p of pods) await c.api.request('DELETE', `/api/v1/namespaces/${NS}/pods/${p.pod.metadata.name}`);
    await untilPasses(
      async () => {
        const names = (await listPods(c.api, NS)).map((p) => p.metadata.name);
        assert.deepEqual(names.sort(), ['plexus-1', 'plexus-2']);
        for (const { p, addresses, netns, records } of had) {
          const n = p.node;
          const leases = [varLibCni(n, 'networks', 'lan'), varLibCni(n, 'networks', 'podnet')].flatMap(filesIn);
          assert.deepEqual(
            leases.filter((f) => addresses.includes(f)),
            [],
            `leases of ${p.pod.metadata.name} on ${n.name}`,
          );
          const stores = filesIn(join(n.paths.plexusState, 'ipam')).flatMap((d) =>
            filesIn(join(n.paths.plexusState, 'ipam', d)),
          );
          assert.deepEqual(
            stores.filter((f) => addresses.includes(f)),
            [],
            `Plexus's leases on ${n.name}`,
          );
          assert.ok(!existsSync(join(boundSource(n.spec.root, '/run/netns'), netns)), `netns ${netns} on ${n.name}`);
          const ports = ip('-n', n.netns, '-o', 'link', 'show', 'master', 'cni0').split('\n').filter(Boolean);
          assert.equal(ports.length, 1, `cni0's ports on ${n.name} (its Plexus pod's only): ${ports.join(' | ')}`);
          assert.deepEqual(
            filesIn(varLibCni(n, 'multus')).filter((f) => f !== 'results'),
            [],
            `Multus's cache`,
          );
          assert.deepEqual(
            filesIn(varLibCni(n, 'results')).filter((f) => records.includes(f)),
            [],
            `libcni's records on ${n.name}`,
          );
        }
      },
      60000,
      500,
    );
    for (const n of [n1(), n2()]) {
      const removals = readFileSync(n.paths.log('plexusd'), 'utf8')
        .split('\n')
        .filter((l) => l.includes('removed as Multus would have removed it'))
        .map((l) => JSON.parse(l) as { pod: string; failed: number });
      assert.deepEqual(
        removals.map((r) => [r.pod, r.failed]),
        [[`${NS}/multus-${n === n1() ? 1 : 2}`, 0]],
        `plexusd on ${n.name} ran every delegate's DEL of Multus's pod, none failed`,
      );
    }
    assert.deepEqual(await eventsOf(c, 'FailedCreatePodSandBox'), []);
    assert.deepEqual(await eventsOf(c, 'FailedKillPod'), []);
  });
});
