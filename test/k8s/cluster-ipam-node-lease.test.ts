/**
 * Cluster IPAM reclaims a node's blocks only on proof that the node is dead (issue 20, item 11): its Node object gone
 * AND its Lease (plexus-node-<node>, renewed by its plexusd) expired for the grace period. On a real kube-apiserver and
 * etcd, with plexusd instances as simulated nodes (each its own --node-name, state dir and socket) on a small pool that
 * node A fills, so that node B can only get addresses by taking A's blocks. Also: a block deleted under a running
 * node stops its allocations in the pool with an error naming the block, and a second plexusd under a node name
 * already served is refused cluster IPAM and says so (item 13).
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { DaemonFixture, podMaker, type ShimOutput, type TestPod } from '../support/daemon';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { NetnsFixture, uniquePrefix } from '../support/netns';
import { macvlanSegment } from '../support/macvlan-segment';
import { holdsWithin } from '../support/until';
import { expectedPrerequisites } from '../support/prerequisites';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('nl');
const o = 100 + Math.floor(Math.random() * 100);
const segment = macvlanSegment(prefix);
const master = segment.master;
const GRACE_S = 3;
const LEASE_S = 2;

// A /29 in /30 blocks: 10.o.0.0/30 (.2 .3: .0 is the network, .1 the gateway) and 10.o.0.4/30 (.4 .5 .6: .7 is the
// broadcast address). Five addresses in two blocks: one node holding both leaves none for another.
const TINY = JSON.stringify({
  cniVersion: '1.0.0',
  name: 'tiny',
  type: 'macvlan',
  master,
  mode: 'bridge',
  ipam: { type: 'plexus', ranges: [[{ subnet: `10.${o}.0.0/29` }]], blockSize: { v4: 30 } },
});

type Pod = TestPod;
interface Block {
  readonly metadata: { name: string; uid: string };
  readonly spec: { pool: string; cidr: string; node: string };
}

const addressesOf = (out: ShimOutput): string[] =>
  ((out.json?.ips as { address: string }[] | undefined) ?? []).map((x) => x.address.split('/')[0]!);

/** GET over plexusd's socket (its /metrics). */
const socketGet = (socket: string, path: string): Promise<string> =>
  new Promise((done, fail) => {
    const req = request({ socketPath: socket, path }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c));
      res.on('end', () => done(text));
    });
    req.on('error', fail);
    req.end();
  });

describe("cluster IPAM takes a node's blocks back only when the node is proven dead", { skip }, () => {
  const fx = new NetnsFixture(prefix);
  let api: KubeApiFixture;
  let kubeconfig = '';
  const daemons: DaemonFixture[] = [];
  const nodeA = `${prefix}-a`;
  const nodeB = `${prefix}-b`;
  let a: DaemonFixture;
  let b: DaemonFixture;
  /** Pods with their addresses, as long as their sandboxes live. */
  const live = new Map<string, { node: string; pod: Pod; addresses: string[] }>();

  const daemon = (node: string): DaemonFixture => {
    const d = new DaemonFixture('tiny', {
      kubeconfig,
      nodeName: node,
      cniBinDir: DEBIAN_PLUGINS,
      ipamReconcileSeconds: 0.5,
      ipamNodeGraceSeconds: GRACE_S,
      nodeLeaseSeconds: LEASE_S,
      orphanSweepSeconds: 0,
    });
    daemons.push(d);
    return d;
  };

  before(async () => {
    segment.create(fx);
    api = await KubeApiFixture.startForPlexus();
    assert.equal((await api.createNad('default', 'tiny', TINY)).status, 201);
    kubeconfig = api.userKubeconfig('plexus');
    await api.createNode(nodeA);
    await api.createNode(nodeB);
    a = daemon(nodeA);
    b = daemon(nodeB);
    await a.start(60000);
    await b.start(60000);
  });
  after(async () => {
    for (const d of daemons) await d.stop();
    await api?.stop();
    fx.cleanup();
  });

  const newPod = podMaker(fx, prefix, []);
  const call = (d: DaemonFixture, command: 'ADD' | 'DEL', pod: Pod): Promise<ShimOutput> =>
    d.cni({
      command,
      containerId: pod.cid,
      netns: pod.netns,
      ifname: 'eth0',
      args: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_INFRA_CONTAINER_ID=${pod.cid}`,
      config: d.runtimeConfig({}, '1.0.0'),
    });
  const add = async (d: DaemonFixture, node: string): Promise<ShimOutput> => {
    const pod = newPod();
    const out = await call(d, 'ADD', pod);
    if (out.code === 0) live.set(pod.cid, { node, pod, addresses: addressesOf(out) });
    else assert.equal((await call(d, 'DEL', pod)).code, 0, 'the runtime DELs a sandbox whose ADD failed');
    return out;
  };
  const blocks = async (): Promise<Block[]> =>
    ((await api.request('GET', '/apis/ipam.plexus.io/v1alpha1/ipblocks')).body as { items: Block[] }).items;
  const blocksOf = async (node: string): Promise<string[]> =>
    (await blocks())
      .filter((x) => x.spec.node === node)
      .map((x) => x.spec.cidr)
      .sort();
  const liveAddresses = (node?: string): string[] =>
    [...live.values()].filter((p) => node === undefined || p.node === node).flatMap((p) => p.addresses);
  const duplicates = (addresses: readonly string[]): string[] => addresses.filter((x, i) => addresses.indexOf(x) !== i);
  const lease = async (node: string) =>
    api.request('GET', `/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/plexus-node-${node}`);

  it("each plexusd holds and renews its node's Lease in its namespace", async () => {
    const first = await lease(nodeA);
    assert.equal(first.status, 200, JSON.stringify(first.body));
    const spec = (first.body as { spec: { holderIdentity: string; leaseDurationSeconds: number; renewTime: string } })
      .spec;
    assert.ok(
      spec.holderIdentity.includes(`/${a.pid}/`),
      `holder ${spec.holderIdentity} names plexusd's process ${a.pid}`,
    );
    assert.equal(spec.leaseDurationSeconds, LEASE_S);
    await sleep(LEASE_S * 1000);
    const later = (await lease(nodeA)).body as { spec: { renewTime: string } };
    assert.ok(Date.parse(later.spec.renewTime) > Date.parse(spec.renewTime), 'renewed within its duration');
  });

  it('node A fills the pool: B gets no address (102) while A holds every block', async () => {
    for (let i = 0; i < 5; i++) {
      const out = await add(a, nodeA);
      assert.equal(out.code, 0, out.stdout);
    }
    assert.equal(liveAddresses(nodeA).length, 5);
    assert.deepEqual(await blocksOf(nodeA), [`10.${o}.0.0/30`, `10.${o}.0.4/30`]);
    const out = await add(b, nodeB);
    assert.equal(out.json?.code, 102, out.stdout);
  });

  it("a deleted Node object whose plexusd still runs keeps its blocks after the grace: B never gets A's live addresses", async () => {
    assert.equal((await api.request('DELETE', `/api/v1/nodes/${nodeA}`)).status, 200);
    // Three graces, with B reconciling twice a second: today's code gave A's blocks to B after one.
    const until = Date.now() + 3 * GRACE_S * 1000;
    while (Date.now() < until) {
      const out = await add(b, nodeB);
      assert.notEqual(
        out.code,
        0,
        `B got ${addressesOf(out).join(', ')} while A's pods hold ${liveAddresses(nodeA).join(', ')}`,
      );
      await sleep(500);
    }
    assert.deepEqual(await blocksOf(nodeA), [`10.${o}.0.0/30`, `10.${o}.0.4/30`], "A's blocks are still A's");
    assert.deepEqual(duplicates(liveAddresses()), []);
  });

  it("once A's plexusd is gone its Lease expires, and with no Node object its blocks are reclaimed after the grace", async () => {
    await a.kill('SIGKILL'); // the node dies: nothing releases its lease, it expires
    const killed = Date.now();
    for (const [cid, p] of live) if (p.node === nodeA) live.delete(cid); // its sandboxes die with it
    await holdsWithin(async () => (await blocksOf(nodeA)).length === 0, 30000, 200);
    const took = Date.now() - killed;
    assert.deepEqual(await blocksOf(nodeA), []);
    assert.ok(
      took >= GRACE_S * 1000,
      `reclaimed ${took} ms after the kill: not before the grace (${GRACE_S} s) after the lease expired`,
    );
    console.log(
      `# A's blocks reclaimed ${took} ms after its plexusd was killed (lease ${LEASE_S} s + grace ${GRACE_S} s)`,
    );
    const out = await add(b, nodeB);
    assert.equal(out.code, 0, out.stdout);
  });

  it('a block deleted under a running plexusd: its next ADD in the pool fails naming the block, and no address is given twice', async () => {
    for (let i = 0; i < 2; i++) assert.equal((await add(b, nodeB)).code, 0);
    const mine = (await blocks()).filter((x) => x.spec.node === nodeB);
    const inUse = mine.find((x) =>
      liveAddresses(nodeB).some(
        (addr) => Number(addr.split('.')[3]) >> 2 === Number(x.spec.cidr.split('.')[3]!.split('/')[0]) >> 2,
      ),
    );
    assert.ok(inUse, `a block of B with a live address (${JSON.stringify(mine.map((x) => x.spec.cidr))})`);
    const deleted = await api.request('DELETE', `/apis/ipam.plexus.io/v1alpha1/ipblocks/${inUse.metadata.name}`);
    assert.equal(deleted.status, 200);
    let out: ShimOutput | undefined;
    for (let i = 0; i < 20; i++) {
      out = await add(b, nodeB);
      if (out.code !== 0) break;
      await sleep(50);
    }
    assert.ok(out && out.code !== 0, 'an ADD after the deletion fails');
    assert.match(
      out.stdout,
      new RegExp(
        `block ${inUse.spec.cidr.replace(/\./g, '\\.')} \\(IPBlock ${inUse.metadata.name.replace(/\./g, '\\.')}\\)`,
      ),
    );
    assert.match(
      b.stderr,
      new RegExp(
        `"level":50[^\\n]*"ipblock":"${inUse.metadata.name.replace(/\./g, '\\.')}"[^\\n]*was deleted by someone else`,
      ),
    );
    assert.deepEqual(duplicates(liveAddresses()), []);
    // No other node holds it: B claims it again on its next pass, and allocates again, never an address it gave.
    let again: ShimOutput | undefined;
    for (let i = 0; i < 40 && again?.code !== 0; i++) {
      await sleep(250);
      again = await add(b, nodeB);
      if (again.code !== 0 && again.json?.code === 102) break;
    }
    assert.ok(again?.code === 0 || again?.json?.code === 102, again?.stdout);
    assert.ok((await blocksOf(nodeB)).includes(inUse.spec.cidr), 'B holds the block again');
    assert.deepEqual(duplicates(liveAddresses()), []);
  });

  it('a second plexusd with a node name already served is refused cluster IPAM, logs an error, counts it and writes an event', async () => {
    const second = daemon(nodeB);
    await second.start(60000);
    const out = await add(second, nodeB);
    assert.equal(out.json?.code, 11, out.stdout);
    assert.match(out.stdout, /another plexusd \(identity [^)]+\) holds the lease of node/);
    assert.match(second.stderr, /"level":50[^\n]*another plexusd renews this node's lease/);
    assert.match(await socketGet(second.socket, '/metrics'), /^plexus_node_lease_conflict 1$/m);
    assert.match(await socketGet(b.socket, '/metrics'), /^plexus_node_lease_conflict 0$/m);
    const events = (await api.request('GET', '/api/v1/namespaces/kube-system/events')).body as {
      items: { reason: string; message: string; involvedObject: { name: string } }[];
    };
    const conflict = events.items.find(
      (e) => e.reason === 'NodeLeaseConflict' && e.involvedObject.name === `plexus-node-${nodeB}`,
    );
    assert.ok(conflict, 'a NodeLeaseConflict event on the Lease');
    // The first keeps serving, and its blocks: the second wrote nothing.
    const held = await blocksOf(nodeB);
    await second.kill('SIGTERM');
    assert.deepEqual(await blocksOf(nodeB), held);
    const holder = ((await lease(nodeB)).body as { spec: { holderIdentity: string } }).spec.holderIdentity;
    assert.ok(holder.includes(`/${b.pid}/`), `the lease is still the first plexusd's (${holder})`);
  });
});
