/**
 * One macvlan network across two simulated nodes (docs/ipam.md, "Example: one network across two nodes"): each node is
 * a network namespace with its own plexusd (simulated-node.ts), the two joined by a veth pair whose ends are the
 * macvlan master `uplink0` on each; the API server is a real kube-apiserver + etcd on the host, reached from inside the
 * nodes through relays. Pods on both nodes get cluster-unique addresses from cluster IPAM (`plexus` on eth0, a
 * Whereabouts config on net1), each from blocks its own node claimed, and ping each other across the nodes; DEL
 * releases every address and link, and the nodes give back the blocks they no longer need.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type ApiPod, ApiPods } from '../support/api-pods';
import { podMaker, type ShimOutput } from '../support/daemon';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { ip, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { Relay } from '../support/relay';
import { SimulatedNode, runEveryStep } from '../support/simulated-node';
import { expectedPrerequisites } from '../support/prerequisites';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('px');
const PODS_PER_NODE = 5;

// Every address lives inside the nodes' namespaces and the API server is this test's own, so the subnets (and the
// master's name) are the documented ones, whatever else runs on the machine.
const NADS: Record<string, object> = {
  lan: {
    cniVersion: '1.0.0',
    name: 'lan',
    type: 'macvlan',
    master: 'uplink0',
    mode: 'bridge',
    ipam: { type: 'plexus', ranges: [[{ subnet: '10.30.0.0/24' }]], blockSize: { v4: 30 } },
  },
  storage: {
    cniVersion: '1.0.0',
    name: 'storage',
    type: 'macvlan',
    master: 'uplink0',
    mode: 'bridge',
    ipam: { type: 'whereabouts', range: '10.31.0.0/24' },
  },
};
const POOLS = { lan: 'lan', storage: '10.31.0.0-24' } as const; // a Whereabouts config names its pool by its range

interface Placed {
  readonly node: SimulatedNode;
  readonly pod: ApiPod;
  readonly name: string;
  /** The addresses ADD gave, without prefix: eth0 on lan, net1 on storage. */
  readonly eth0: string;
  readonly net1: string;
}
interface Block {
  readonly metadata: { name: string };
  readonly spec: { pool: string; cidr: string; node: string };
}

const toInt = (address: string): number => address.split('.').reduce((n, octet) => n * 256 + Number(octet), 0);
const inCidr = (address: string, cidr: string): boolean => {
  const [base, bits] = cidr.split('/');
  const size = 2 ** (32 - Number(bits));
  return Math.floor(toInt(address) / size) === Math.floor(toInt(base!) / size);
};

/** The address ADD put on the pod interface `ifname`, from the CNI result. */
function addressOn(out: ShimOutput, ifname: string): string {
  const result = out.json as
    { interfaces?: { name: string; sandbox?: string }[]; ips?: { address: string; interface?: number }[] } | undefined;
  const index = result?.interfaces?.findIndex((i) => i.name === ifname && i.sandbox) ?? -1;
  const address = result?.ips?.find((x) => x.interface === index)?.address;
  assert.ok(address, `no address on ${ifname} in ${out.stdout}`);
  return address.split('/')[0]!;
}

/** `ping` from inside a pod's namespace; resolves with its exit code and output. */
const ping = (netns: string, address: string): Promise<{ code: number; out: string }> =>
  new Promise((done) => {
    execFile('ip', ['netns', 'exec', netns, 'ping', '-c', '3', '-W', '2', address], (e, stdout, stderr) =>
      done({ code: e ? Number((e as { code?: number }).code ?? 1) : 0, out: stdout + stderr }),
    );
  });

describe('one cluster-IPAM macvlan network across two simulated nodes', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  const newPod = podMaker(fx, prefix, []);
  let dir = '';
  let api: KubeApiFixture | undefined;
  let hostRelay: Relay | undefined;
  const nodes: SimulatedNode[] = [];
  const placed: Placed[] = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'plexus-two-nodes-'));
    const [nsA, nsB] = [fx.create('nodeA'), fx.create('nodeB')];
    // The wire between the nodes: a veth pair made inside them, so no link ever exists on the host.
    ip('-n', nsA.name, 'link', 'add', 'uplink0', 'type', 'veth', 'peer', 'name', 'uplink0', 'netns', nsB.name);
    for (const ns of [nsA, nsB]) ip('-n', ns.name, 'link', 'set', 'uplink0', 'up');

    api = await KubeApiFixture.startForPlexus();
    for (const [name, config] of Object.entries(NADS))
      assert.equal((await api.createNad('default', name, JSON.stringify(config))).status, 201, name);
    hostRelay = await Relay.start({ path: join(dir, 'api.sock') }, { host: '127.0.0.1', port: api.apiPort });
    const kubeconfig = api.userKubeconfig('plexus');
    for (const [ns, suffix] of [
      [nsA, 'a'],
      [nsB, 'b'],
    ] as const) {
      const nodeName = `${prefix}-node-${suffix}`;
      await api.createNode(nodeName);
      nodes.push(
        await SimulatedNode.start({
          netns: ns,
          nodeName,
          apiSocket: join(dir, 'api.sock'),
          kubeconfig,
          defaultNetwork: 'lan',
          settings: { ipamReconcileSeconds: 1 },
        }),
      );
    }
  });
  after(async () => {
    // Every step runs, whatever failed before it; the first failure is reported.
    const steps = [
      ...nodes.map((n) => () => n.stop()),
      () => hostRelay?.stop(),
      () => api?.stop(),
      () => fx.cleanup(),
      () => dir && rmSync(dir, { recursive: true, force: true }),
    ];
    await runEveryStep(steps);
  });

  const call = (p: { node: SimulatedNode; pod: ApiPod }, command: 'ADD' | 'DEL'): Promise<ShimOutput> =>
    p.node.daemon.cni({
      command,
      containerId: p.pod.pod.cid,
      netns: p.pod.pod.netns,
      ifname: 'eth0',
      args: p.pod.args,
      config: p.node.daemon.runtimeConfig(
        { runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': 'storage' } } },
        '1.0.0',
      ),
    });
  const blocks = async (): Promise<Block[]> =>
    ((await api!.request('GET', '/apis/ipam.plexus.io/v1alpha1/ipblocks')).body as { items: Block[] }).items;
  const blocksOf = (all: readonly Block[], node: SimulatedNode, pool: string): string[] =>
    all
      .filter((b) => b.spec.node === node.nodeName && b.spec.pool === pool)
      .map((b) => b.spec.cidr)
      .sort();
  /** A node's lease files of a pool: address → the lease's owner line (network, pod UID, namespace/name). */
  const leases = (node: SimulatedNode, pool: string): Map<string, string> => {
    const root = join(node.daemon.stateDir, 'ipam-pools', pool);
    let files: string[];
    try {
      files = readdirSync(root).filter((f) => !f.startsWith('.') && !f.startsWith('last_reserved'));
    } catch {
      return new Map();
    }
    return new Map(files.map((f) => [f, readFileSync(join(root, f), 'utf8').split('\n')[4] ?? '']));
  };

  it(`ADD of ${PODS_PER_NODE} pods on each node: distinct addresses inside the pools, from blocks of the pod's own node`, async () => {
    const pods = await Promise.all(
      nodes.flatMap((node, n) =>
        Array.from({ length: PODS_PER_NODE }, async (_, i) => {
          const name = `${'ab'[n]}${i + 1}`;
          return {
            node,
            name,
            pod: await new ApiPods(api!, node.nodeName, newPod).create(name, {
              'k8s.v1.cni.cncf.io/networks': 'storage',
            }),
          };
        }),
      ),
    );
    const outs = await Promise.all(pods.map(async (p) => ({ ...p, out: await call(p, 'ADD') })));
    for (const p of outs) assert.equal(p.out.code, 0, `${p.name} on ${p.node.nodeName}: ${p.out.stdout}`);
    placed.push(
      ...outs.map((p) => ({
        node: p.node,
        pod: p.pod,
        name: p.name,
        eth0: addressOn(p.out, 'eth0'),
        net1: addressOn(p.out, 'net1'),
      })),
    );

    const all = placed.flatMap((p) => [p.eth0, p.net1]);
    assert.equal(new Set(all).size, all.length, `duplicates among ${all.join(' ')}`);
    for (const p of placed) {
      assert.ok(
        inCidr(p.eth0, '10.30.0.0/24') && !['10.30.0.0', '10.30.0.1', '10.30.0.255'].includes(p.eth0),
        `${p.name} eth0 ${p.eth0}`,
      );
      assert.ok(
        inCidr(p.net1, '10.31.0.0/24') && !['10.31.0.0', '10.31.0.1', '10.31.0.255'].includes(p.net1),
        `${p.name} net1 ${p.net1}`,
      );
      assert.match(
        ip('-n', p.pod.pod.ns, '-o', '-4', 'addr', 'show', 'eth0'),
        new RegExp(`inet ${p.eth0.replace(/\./g, '\\.')}/24 `),
      );
      assert.match(
        ip('-n', p.pod.pod.ns, '-o', '-4', 'addr', 'show', 'net1'),
        new RegExp(`inet ${p.net1.replace(/\./g, '\\.')}/24 `),
      );
    }

    const claimed = await blocks();
    console.log(
      `blocks: ${nodes
        .map(
          (n) =>
            `${n.nodeName}: ${Object.values(POOLS)
              .map((pool) => `${pool} ${blocksOf(claimed, n, pool).join(' ')}`)
              .join(', ')}`,
        )
        .join('; ')}`,
    );
    const [a, b] = nodes as [SimulatedNode, SimulatedNode];
    for (const pool of Object.values(POOLS)) {
      const ofA = blocksOf(claimed, a, pool);
      const ofB = blocksOf(claimed, b, pool);
      assert.ok(
        ofA.length > 0 && ofB.length > 0,
        `both nodes hold blocks of ${pool}: ${ofA.join(' ')} | ${ofB.join(' ')}`,
      );
      assert.deepEqual(
        ofA.filter((c) => ofB.includes(c)),
        [],
        `no block of ${pool} held by both`,
      );
    }
    for (const node of nodes) {
      // /30 blocks hold at most 4 addresses: 5 pods need a second block of lan; storage's /26 blocks need one.
      assert.ok(
        blocksOf(claimed, node, POOLS.lan).length >= 2,
        `${node.nodeName} lan blocks: ${blocksOf(claimed, node, POOLS.lan).join(' ')}`,
      );
      assert.equal(blocksOf(claimed, node, POOLS.storage).length, 1);
    }
    for (const p of placed) {
      assert.ok(
        blocksOf(claimed, p.node, POOLS.lan).some((c) => inCidr(p.eth0, c)),
        `${p.name}'s ${p.eth0} is in a lan block of ${p.node.nodeName}`,
      );
      assert.ok(
        blocksOf(claimed, p.node, POOLS.storage).some((c) => inCidr(p.net1, c)),
        `${p.name}'s ${p.net1} is in a storage block of ${p.node.nodeName}`,
      );
      // The lease is on the pod's node, naming the pod.
      for (const [pool, address] of [
        [POOLS.lan, p.eth0],
        [POOLS.storage, p.net1],
      ] as const) {
        const owner = JSON.parse(leases(p.node, pool).get(address) ?? '{}') as { podUid?: string; pod?: string };
        assert.deepEqual(
          [owner.podUid, owner.pod],
          [p.pod.uid, `default/${p.name}`],
          `lease of ${address} on ${p.node.nodeName}`,
        );
      }
    }
  });

  it('each pod on node A and its peer on node B ping each other across the nodes, on both networks', async () => {
    const [a, b] = nodes as [SimulatedNode, SimulatedNode];
    const onA = placed.filter((p) => p.node === a);
    const onB = placed.filter((p) => p.node === b);
    assert.equal(onA.length, PODS_PER_NODE);
    const pings = onA.flatMap((pa, i) => {
      const pb = onB[i]!;
      return [
        [pa, pb.eth0],
        [pb, pa.eth0],
        [pa, pb.net1],
        [pb, pa.net1],
      ] as const;
    });
    const results = await Promise.all(
      pings.map(async ([from, to]) => ({ from: from.name, to, ...(await ping(from.pod.pod.ns, to)) })),
    );
    assert.deepEqual(
      results.filter((r) => r.code !== 0).map((r) => `${r.from} → ${r.to}: ${r.out}`),
      [],
    );
  });

  it('DEL of every pod releases every address and link, and each node gives back the lan blocks it no longer needs', async () => {
    for (const p of placed) assert.equal((await call(p, 'DEL')).code, 0, p.name);
    for (const p of placed) assert.deepEqual(podLinks(p.pod.pod.ns), [], `${p.name}'s namespace is empty`);
    for (const node of nodes) {
      assert.deepEqual(podLinks(node.netns.name), ['uplink0'], `${node.nodeName} has no link left but its uplink`);
      for (const pool of Object.values(POOLS))
        assert.deepEqual([...leases(node, pool).keys()], [], `${node.nodeName}'s leases of ${pool}`);
    }
    // The reconciler (every second here) deletes a node's empty blocks, keeping one per pool so its next pod needs no claim.
    const settled = (all: readonly Block[]): boolean =>
      nodes.every((n) => blocksOf(all, n, POOLS.lan).length === 1 && blocksOf(all, n, POOLS.storage).length === 1);
    let now = await blocks();
    for (let i = 0; i < 100 && !settled(now); i++) {
      await sleep(200);
      now = await blocks();
    }
    assert.deepEqual(
      nodes.map((n) => [blocksOf(now, n, POOLS.lan).length, blocksOf(now, n, POOLS.storage).length]),
      [
        [1, 1],
        [1, 1],
      ],
    );
  });
});
