/**
 * IPAMClaims and pods that come back, on a real kube-apiserver + etcd: three plexusd instances as simulated nodes
 * (each its own --node-name, state dir and socket) with deploy/10-rbac.yaml's permissions, pods as real API objects
 * (their annotations and UIDs come from the API), the real shim and the macvlan driver on a veth the test owns.
 * Issue 12: a claim keeps a pod interface's addresses across DEL+ADD and across nodes, is freed when it is deleted and
 * not before, is refused when missing or on host-local; two nodes using one claim at once get the same addresses; a
 * StatefulSet pod recreated under its name never loses its new address to the old one's cleanup.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, type ShimOutput } from '../support/daemon';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { NetnsFixture, uniquePrefix } from '../support/netns';
import { macvlanSegment } from '../support/macvlan-segment';
import { expectedPrerequisites } from '../support/prerequisites';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';
import { untilTrue } from '../support/until';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('ic');
const o = 100 + Math.floor(Math.random() * 100);
const segment = macvlanSegment(prefix);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const CLAIMS = '/apis/k8s.cni.cncf.io/v1alpha1/namespaces/default/ipamclaims';
const BLOCKS = '/apis/ipam.plexus.io/v1alpha1/ipblocks';

const NADS: Record<string, string> = {
  base: segment.nad('base', { type: 'host-local', ranges: [[{ subnet: `10.${o}.100.0/24` }]] }),
  // Dual stack: a claim holds one address per family.
  vmnet: segment.nad('vmnet', {
    type: 'plexus',
    ranges: [[{ subnet: `10.${o}.0.0/22` }], [{ subnet: `fd00:${o}::/116` }]],
  }),
  sts: segment.nad('sts', { type: 'plexus', ranges: [[{ subnet: `10.${o}.8.0/24` }]] }),
  // One block of 13 addresses: what a claim owns in it shows in who else gets what.
  tiny: segment.nad('tiny', { type: 'plexus', ranges: [[{ subnet: `10.${o}.9.0/28` }]], blockSize: { v4: 28 } }),
  local: segment.nad('local', { type: 'host-local', ranges: [[{ subnet: `10.${o}.101.0/24` }]] }),
};

interface Pod {
  readonly name: string;
  readonly uid: string;
  readonly cid: string;
  readonly netns: string;
}
interface Entry {
  readonly address: string;
  readonly claim: string;
  readonly claimUid: string;
  readonly nodes: string[];
}
interface Block {
  readonly metadata: { name: string };
  readonly spec: { pool: string; cidr: string; node: string; claims?: Entry[] };
}

const addressesOf = (out: ShimOutput, ifname = 'net1'): string[] => {
  const ifaces = (out.json?.interfaces as { name: string }[] | undefined) ?? [];
  const index = ifaces.findIndex((i) => i.name === ifname);
  return ((out.json?.ips as { address: string; interface?: number }[] | undefined) ?? [])
    .filter((x) => x.interface === index)
    .map((x) => x.address);
};

describe('IPAMClaims and recreated pods on one API server', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  let api: KubeApiFixture;
  const nodes: DaemonFixture[] = [];
  const nodeNames = [0, 1, 2].map((i) => `${prefix}-n${i}`);
  let count = 0;

  before(async () => {
    segment.create(fx);
    api = await KubeApiFixture.startForPlexus();
    for (const [name, config] of Object.entries(NADS))
      assert.equal((await api.createNad('default', name, config)).status, 201, name);
    const kubeconfig = api.userKubeconfig('plexus');
    for (const name of nodeNames) {
      await api.createNode(name);
      nodes.push(
        new DaemonFixture('base', {
          kubeconfig,
          nodeName: name,
          cniBinDir: DEBIAN_PLUGINS,
          ipamReconcileSeconds: 1,
          ipamNodeGraceSeconds: 2,
        }),
      );
    }
    await Promise.all(nodes.map((n) => n.start(60000)));
  });
  after(async () => {
    for (const n of nodes) await n.stop();
    await api?.stop();
    fx.cleanup();
  });

  /** A pod object on node `i` selecting `networks`, and a sandbox for it. */
  const newPod = async (i: number, networks: string, name = `${prefix}-p${++count}`): Promise<Pod> => {
    const created = await api.createPod('default', name, {
      nodeName: nodeNames[i]!,
      annotations: { 'k8s.v1.cni.cncf.io/networks': networks },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const ns = fx.create(`s${++count}`);
    return {
      name,
      uid: (created.body as { metadata: { uid: string } }).metadata.uid,
      cid: `${prefix}c${count}`,
      netns: ns.path,
    };
  };
  const call = (i: number, command: 'ADD' | 'DEL', pod: Pod): Promise<ShimOutput> =>
    nodes[i]!.cni({
      command,
      containerId: pod.cid,
      netns: pod.netns,
      ifname: 'eth0',
      args: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${pod.name};K8S_POD_INFRA_CONTAINER_ID=${pod.cid};K8S_POD_UID=${pod.uid}`,
      config: nodes[i]!.runtimeConfig({}, '1.0.0'),
    });
  const claimOf = (name: string, network = 'vmnet'): string =>
    JSON.stringify([{ name: network, 'ipam-claim-reference': name }]);
  const createClaim = async (name: string, network = 'vmnet'): Promise<void> => {
    const r = await api.request('POST', CLAIMS, {
      apiVersion: 'k8s.cni.cncf.io/v1alpha1',
      kind: 'IPAMClaim',
      metadata: { name },
      spec: { network, interface: 'net1' },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
  };
  const getClaim = async (name: string): Promise<{ status?: { ips?: string[]; ownerPod?: string } }> =>
    (await api.request('GET', `${CLAIMS}/${name}`)).body as { status?: { ips?: string[]; ownerPod?: string } };
  const blocks = async (): Promise<Block[]> => ((await api.request('GET', BLOCKS)).body as { items: Block[] }).items;
  /** Claim entries of every block, with the block's node. */
  const entries = async (): Promise<(Entry & { holder: string })[]> =>
    (await blocks()).flatMap((b) => (b.spec.claims ?? []).map((e) => ({ ...e, holder: b.spec.node })));
  /** The addresses leased on node `i` in pool `pool` (lease file names). */
  const leasesOn = (i: number, pool: string): string[] => {
    try {
      return readdirSync(join(nodes[i]!.stateDir, 'ipam-pools', pool)).filter(
        (f) => !f.startsWith('.') && !f.startsWith('last_reserved'),
      );
    } catch {
      return [];
    }
  };
  const bare = (cidr: string): string => cidr.split('/')[0]!;

  /** Deletes claim `name` if it is there, at the end of a test. */
  const dropClaim = async (name: string): Promise<void> => {
    await api.request('DELETE', `${CLAIMS}/${name}`);
  };
  /** Claim `name` made and used by a pod ADDed on node `i` (still attached): the claim's addresses and the pod. */
  const claimInUse = async (name: string, i: number): Promise<{ addresses: string[]; pod: Pod }> => {
    await createClaim(name);
    const pod = await newPod(i, claimOf(name), `virt-launcher-${name}-a`);
    const out = await call(i, 'ADD', pod);
    assert.equal(out.code, 0, out.stdout);
    return { addresses: addressesOf(out), pod };
  };
  /** Claim `name` used on node 0, then by its pod's successor on node 1 (still attached there). */
  const claimMoved = async (name: string): Promise<{ addresses: string[]; pod: Pod }> => {
    const first = await claimInUse(name, 0);
    assert.equal((await call(0, 'DEL', first.pod)).code, 0);
    const moved = await newPod(1, claimOf(name), `virt-launcher-${name}-b`);
    const out = await call(1, 'ADD', moved);
    assert.equal(out.code, 0, out.stdout);
    assert.deepEqual(addressesOf(out).sort(), [...first.addresses].sort(), 'the same addresses on node 1');
    return { addresses: first.addresses, pod: moved };
  };

  it("a claim gets its addresses recorded in status.ips and in its blocks, and keeps them across DEL and a new pod's ADD", async (t) => {
    t.after(() => dropClaim('vm1'));
    const { addresses: vm1, pod: first } = await claimInUse('vm1', 0);
    assert.equal(vm1.length, 2, 'dual stack: one address per family');
    const claim = await getClaim('vm1');
    assert.deepEqual([...(claim.status?.ips ?? [])].sort(), [...vm1].sort());
    assert.equal(claim.status?.ownerPod, 'virt-launcher-vm1-a');
    const recorded = (await entries()).filter((e) => e.claim === 'default/vm1');
    assert.deepEqual(recorded.map((e) => e.address).sort(), vm1.map(bare).sort());
    assert.ok(recorded.every((e) => e.holder === nodeNames[0] && e.nodes.join() === nodeNames[0]));

    assert.equal((await call(0, 'DEL', first)).code, 0);
    assert.ok(!leasesOn(0, 'vmnet').includes(bare(vm1[0]!)), "the pod's lease ends with its sandbox");
    await sleep(2500); // reconciler passes: a claim that exists keeps its addresses
    assert.equal((await entries()).filter((e) => e.claim === 'default/vm1').length, 2, 'the claim still owns them');

    const again = await newPod(0, claimOf('vm1'), 'virt-launcher-vm1-b');
    const out2 = await call(0, 'ADD', again);
    assert.equal(out2.code, 0, out2.stdout);
    assert.deepEqual(addressesOf(out2).sort(), [...vm1].sort());
    assert.equal((await call(0, 'DEL', again)).code, 0);
  });

  it("no other pod gets a claim's address: dynamic allocations skip it and a static request is refused (101)", async (t) => {
    t.after(() => dropClaim('vm6'));
    const held = await claimInUse('vm6', 0);
    assert.equal((await call(0, 'DEL', held.pod)).code, 0);
    const stat = await newPod(
      0,
      JSON.stringify([{ name: 'vmnet', ips: [held.addresses.find((a) => !a.includes(':'))!] }]),
    );
    const refused = await call(0, 'ADD', stat);
    assert.equal(refused.json?.code, 101, refused.stdout);
    assert.match(refused.stdout, /owned by IPAMClaim default\/vm6/);
    assert.equal((await call(0, 'DEL', stat)).code, 0);
    // A pool of one block: the claim's address is never handed out, even when the block is full.
    await createClaim('vm5', 'tiny');
    const owner = await newPod(2, claimOf('vm5', 'tiny'));
    const owned = await call(2, 'ADD', owner);
    assert.equal(owned.code, 0, owned.stdout);
    const x = addressesOf(owned)[0]!;
    assert.equal((await call(2, 'DEL', owner)).code, 0);
    const others: Pod[] = [];
    const got: string[] = [];
    for (let k = 0; k < 13; k++) {
      const pod = await newPod(2, 'tiny');
      others.push(pod);
      const out = await call(2, 'ADD', pod);
      if (k < 12) {
        assert.equal(out.code, 0, out.stdout);
        got.push(...addressesOf(out));
      } else {
        assert.equal(out.json?.code, 102, `the 13th address is the claim's: ${out.stdout}`);
      }
    }
    assert.ok(!got.includes(x), `${got.join()} vs the claim's ${x}`);
    for (const pod of others) assert.equal((await call(2, 'DEL', pod)).code, 0);
    assert.equal((await api.request('DELETE', `${CLAIMS}/vm5`)).status, 200);
  });

  it("a claim's addresses follow its pod to another node (the block stays node 0's; node 1 is recorded as a user)", async (t) => {
    const { addresses: vm7, pod: moved } = await claimMoved('vm7');
    t.after(async () => {
      await call(1, 'DEL', moved);
      await dropClaim('vm7');
    });
    const recorded = (await entries()).filter((e) => e.claim === 'default/vm7');
    assert.ok(
      recorded.every((e) => e.holder === nodeNames[0] && e.nodes.includes(nodeNames[1]!)),
      JSON.stringify(recorded),
    );
    assert.ok(
      vm7.every((a) => leasesOn(1, 'vmnet').includes(bare(a))),
      'node 1 leases them for its pod',
    );
    await sleep(2500);
    assert.ok(
      vm7.every((a) => leasesOn(1, 'vmnet').includes(bare(a))),
      "node 1's reconciler does not treat them as strays",
    );
  });

  it('two nodes using one new claim at once get the same addresses (the first status write wins), nothing else is kept', async () => {
    // IPv4 only: the two pods share one L2 segment (one master), where a second IPv6 holder of an address fails
    // duplicate address detection, as the reference macvlan's ADD does.
    await createClaim('vm2', 'sts');
    const a = await newPod(1, claimOf('vm2', 'sts'), 'virt-launcher-vm2-src');
    const b = await newPod(2, claimOf('vm2', 'sts'), 'virt-launcher-vm2-dst');
    const [outA, outB] = await Promise.all([call(1, 'ADD', a), call(2, 'ADD', b)]);
    assert.equal(outA.code, 0, outA.stdout);
    assert.equal(outB.code, 0, outB.stdout);
    assert.deepEqual(addressesOf(outA).sort(), addressesOf(outB).sort());
    const claimed = (await getClaim('vm2')).status?.ips ?? [];
    assert.deepEqual([...claimed].sort(), addressesOf(outA).sort());
    const recorded = (await entries()).filter((e) => e.claim === 'default/vm2');
    assert.deepEqual(
      recorded.map((e) => e.address).sort(),
      claimed.map(bare).sort(),
      "the loser's own new addresses were given back",
    );
    for (const [i, pod] of [
      [1, a],
      [2, b],
    ] as const)
      assert.equal((await call(i, 'DEL', pod)).code, 0);
    assert.equal((await api.request('DELETE', `${CLAIMS}/vm2`)).status, 200);
  });

  it('a missing claim is "try again later" (11), and the retried ADD succeeds once the claim exists', async () => {
    const pod = await newPod(2, claimOf('vm3'));
    const out = await call(2, 'ADD', pod);
    assert.equal(out.json?.code, 11, out.stdout);
    assert.match(out.stdout, /IPAMClaim default\/vm3 .* does not exist/);
    assert.equal((await call(2, 'DEL', pod)).code, 0);
    await createClaim('vm3');
    const retried = await call(2, 'ADD', pod);
    assert.equal(retried.code, 0, retried.stdout);
    assert.equal(addressesOf(retried).length, 2);
    assert.equal((await call(2, 'DEL', pod)).code, 0);
    assert.equal((await api.request('DELETE', `${CLAIMS}/vm3`)).status, 200);
  });

  it('a claim on a host-local network is refused (7): only the cluster store can keep an address for it', async () => {
    await createClaim('vm4', 'local');
    const pod = await newPod(2, claimOf('vm4', 'local'));
    const out = await call(2, 'ADD', pod);
    assert.equal(out.json?.code, 7, out.stdout);
    assert.match(out.stdout, /cannot honour an ipam-claim-reference/);
    assert.equal((await call(2, 'DEL', pod)).code, 0);
  });

  it('deleting a claim frees its addresses once no pod uses them, not before', async (t) => {
    const { addresses: vm8, pod } = await claimMoved('vm8');
    t.after(async () => {
      await call(1, 'DEL', pod);
      await dropClaim('vm8');
    });
    assert.equal((await api.request('DELETE', `${CLAIMS}/vm8`)).status, 200);
    await sleep(3000); // reconciler passes on every node
    const still = (await entries()).filter((e) => e.claim === 'default/vm8');
    assert.equal(still.length, 2, "node 1's pod still uses them");
    assert.ok(
      still.every((e) => e.nodes.join() === nodeNames[1]),
      `node 0 let go, node 1 did not: ${JSON.stringify(still)}`,
    );
    assert.equal((await call(1, 'DEL', pod)).code, 0);
    await untilTrue(
      'the entries of vm8 are gone',
      async () => (await entries()).every((e) => e.claim !== 'default/vm8'),
      20000,
      200,
    );
    // Freed: node 0, which holds the block, hands the address out again.
    const stat = await newPod(0, JSON.stringify([{ name: 'vmnet', ips: [vm8.find((a) => !a.includes(':'))!] }]));
    const out = await call(0, 'ADD', stat);
    assert.equal(out.code, 0, out.stdout);
    assert.equal((await call(0, 'DEL', stat)).code, 0);
  });

  it("a StatefulSet pod recreated under its name (new UID) keeps its new address; the old sandbox's is freed by its own end", async () => {
    const old = await newPod(0, 'sts', 'web-0');
    const outA = await call(0, 'ADD', old);
    assert.equal(outA.code, 0, outA.stdout);
    const a = bare(addressesOf(outA)[0]!);
    // The pod object is deleted and the StatefulSet controller creates web-0 again: a new UID, same name, same node,
    // while the runtime has not yet torn the old sandbox down.
    assert.equal(
      (await api.request('DELETE', '/api/v1/namespaces/default/pods/web-0?gracePeriodSeconds=0')).status,
      200,
    );
    await untilTrue(
      'web-0 is gone',
      async () => (await api.request('GET', '/api/v1/namespaces/default/pods/web-0')).status === 404,
      20000,
      200,
    );
    const recreated = await newPod(0, 'sts', 'web-0');
    assert.notEqual(recreated.uid, old.uid);
    const outB = await call(0, 'ADD', recreated);
    assert.equal(outB.code, 0, outB.stdout);
    const b = bare(addressesOf(outB)[0]!);
    assert.notEqual(a, b);
    await sleep(3000); // IPAM reconciler passes: neither lease is freed; the old sandbox may still have its address
    assert.deepEqual(leasesOn(0, 'sts').sort(), [a, b].sort());
    // The runtime's reconciliation (CNI GC with the sandboxes it keeps) ends the old sandbox: its lease alone goes.
    const gc = await nodes[0]!.cni({
      command: 'GC',
      config: nodes[0]!.runtimeConfig({
        'cni.dev/valid-attachments': [{ containerID: recreated.cid, ifname: 'eth0' }],
      }),
    });
    assert.equal(gc.code, 0, gc.stdout);
    assert.deepEqual(leasesOn(0, 'sts'), [b]);
    await sleep(2500);
    assert.deepEqual(leasesOn(0, 'sts'), [b], 'and no reconciler pass frees the live one');
    assert.equal((await call(0, 'DEL', recreated)).code, 0);
    assert.deepEqual(leasesOn(0, 'sts'), []);
  });

  it("a pod deleted while its node's daemon was down is cleaned when the daemon is back (the spooled DEL)", async () => {
    const pod = await newPod(2, 'sts');
    const out = await call(2, 'ADD', pod);
    assert.equal(out.code, 0, out.stdout);
    const held = bare(addressesOf(out)[0]!);
    await nodes[2]!.kill('SIGTERM');
    const del = await call(2, 'DEL', pod);
    assert.equal(del.code, 0, `the shim spools the DEL: ${del.stdout}`);
    assert.ok(leasesOn(2, 'sts').includes(held));
    await nodes[2]!.start(60000);
    await untilTrue('the spooled DEL released the lease', async () => !leasesOn(2, 'sts').includes(held), 20000, 200);
  });
});
