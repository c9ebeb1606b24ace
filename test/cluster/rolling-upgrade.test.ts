/**
 * Proof 3 of issue 37, as close as the fixture comes to it: Plexus installed, upgraded and removed across a 3-node
 * cluster the way the DaemonSet does it on each node (plexus-install's install, then plexusd --config with the
 * ConfigMap's settings; plexusd stopped by SIGTERM as the kubelet stops its pod), not from the image: the nodes'
 * containerds run the DaemonSet's pod only with the host paths of deploy/ bound per node, which the fixture does not do
 * yet (docs/testing.md). The nodes already run pods on their own network when Plexus comes; the upgrade restarts
 * plexusd one node at a time (maxUnavailable 1) while pods with a secondary network are created and deleted on every
 * node; then every pod goes and Plexus is uninstalled: no sandbox failed, and no address or link is left on any node.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { clusterMissing, TestCluster } from '../support/cluster/cluster';
import type { ClusterNode } from '../support/cluster/node';
import { boundSource } from '../support/cluster/node-namespaces';
import {
  createPod,
  deleteAllPods,
  ensureNamespace,
  listPods,
  NETWORKS,
  networkStatus,
  sandboxFailures,
  waitRunning,
} from '../support/cluster/pods';
import { ip } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { until } from '../support/until';

const skip = expectedPrerequisites(clusterMissing());
const NS = 'upgrade';
const o = 100 + Math.floor(Math.random() * 40);
const t = Math.floor(Math.random() * 200);
const LAN = JSON.stringify({
  cniVersion: '1.0.0',
  name: 'lan',
  type: 'macvlan',
  master: 'uplink0',
  mode: 'bridge',
  ipam: { type: 'plexus', ranges: [[{ subnet: `10.${o}.${t}.0/24` }]], blockSize: { v4: 27 } },
});
/** The links a node has of its own: whatever else is there once every pod is gone was left behind. */
const NODE_LINKS = ['lo', 'uplink0', 'uplink1', 'cni0'];
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Address files in a store directory (host-local's or Plexus's), none while it does not exist. */
const addressFiles = (dir: string): string[] => {
  try {
    return readdirSync(dir).filter((f) => /^[\d.]+$|:/.test(f));
  } catch {
    return [];
  }
};
/** What a node still holds with no pod on it: links beyond its own, addresses of its own network and of lan. */
const leftOn = (n: ClusterNode): string[] => {
  const links = ip('-n', n.netns, '-o', 'link', 'show')
    .split('\n')
    .map((l) => /^\d+: ([^:@]+)/.exec(l)?.[1])
    .filter((l): l is string => l !== undefined && !NODE_LINKS.includes(l));
  const own = addressFiles(join(boundSource(n.spec.root, '/var/lib/cni'), 'networks', 'podnet'));
  const lan = addressFiles(join(n.paths.plexusState, 'ipam-pools', 'lan'));
  return [...links.map((l) => `link ${l}`), ...own.map((a) => `podnet ${a}`), ...lan.map((a) => `lan ${a}`)].map(
    (x) => `${n.name}: ${x}`,
  );
};

describe('Plexus installed, upgraded node by node under churn, and removed, across three nodes', { skip }, () => {
  let cluster: TestCluster | undefined;

  before(async () => {
    cluster = await TestCluster.start({ plexusAtStart: false, timing: { orphanSweepSeconds: 5 } });
    await ensureNamespace(cluster.api, NS);
    assert.equal((await cluster.api.createNad(NS, 'lan', LAN)).status, 201);
  });
  after(async () => {
    assert.deepEqual((await cluster?.stop()) ?? [], []);
  });

  it('installed on nodes that already run pods on their own network: those keep running, new pods get lan too', async () => {
    const c = cluster!;
    const before = c.nodes.flatMap((n) => [0, 1].map((i) => ({ n, name: `pre-${n.name}-${i}` })));
    for (const { n, name } of before) await createPod(c.api, NS, name, { nodeName: n.name });
    await until(
      'the pods made before Plexus Running',
      async () => ((await listPods(c.api, NS)).every((p) => p.status?.phase === 'Running') ? true : undefined),
      90000,
      250,
    );
    for (const n of c.nodes) await n.startPlexus();
    const after = c.nodes.map((n) => ({ n, name: `post-${n.name}` }));
    for (const { n, name } of after)
      await createPod(c.api, NS, name, { nodeName: n.name, annotations: { [NETWORKS]: 'lan' } });
    const pods = await waitRunning(
      c.api,
      NS,
      after.map((p) => p.name),
    );
    for (const p of pods)
      assert.deepEqual(
        networkStatus(p).map((s) => s.name),
        ['podnet', `${NS}/lan`],
        p.metadata.name,
      );
    const pre = (await listPods(c.api, NS)).filter((p) => p.metadata.name.startsWith('pre-'));
    assert.deepEqual(
      pre.filter((p) => p.status?.phase !== 'Running').map((p) => p.metadata.name),
      [],
    );
  });

  it('plexusd upgraded one node at a time while pods are created and deleted on every node: no sandbox fails', async () => {
    const c = cluster!;
    let churning = true;
    const made: string[] = [];
    const churn = (async (): Promise<void> => {
      for (let wave = 0; churning; wave++) {
        for (const n of c.nodes) {
          const name = `churn-${wave}-${n.name}`;
          await createPod(c.api, NS, name, { nodeName: n.name, annotations: { [NETWORKS]: 'lan' } });
          made.push(name);
        }
        // The pods of three waves ago go once Running (a pod deleted mid-ADD is another story than the upgrade's).
        const old = (await listPods(c.api, NS)).filter(
          (p) => p.metadata.name.startsWith(`churn-${wave - 3}-`) && p.status?.phase === 'Running',
        );
        for (const p of old) await c.api.request('DELETE', `/api/v1/namespaces/${NS}/pods/${p.metadata.name}`);
        await sleep(1500);
      }
    })();
    try {
      await sleep(3000);
      for (const n of c.nodes) {
        await n.stopPlexus();
        await sleep(1000); // the window a DaemonSet's rolling update leaves between the old pod and the new
        await n.startPlexus();
        await sleep(3000);
      }
    } finally {
      churning = false;
      await churn;
    }
    // Pods whose DELETE the last waves sent are on their way out (deletionTimestamp set): not waited for.
    const left = (await listPods(c.api, NS))
      .filter((p) => p.metadata.deletionTimestamp === undefined)
      .map((p) => p.metadata.name)
      .filter((n) => n.startsWith('churn-'));
    await waitRunning(c.api, NS, left, 120000);
    console.log(
      `${made.length} pods created across the upgrade of ${c.nodes.length} nodes, ${left.length} still running`,
    );
    assert.deepEqual(await sandboxFailures(c.api, NS), []);
  });

  it('every pod deleted, then Plexus uninstalled: nothing is left on any node, and new pods get the node network only', async () => {
    const c = cluster!;
    await deleteAllPods(c.api, NS);
    const left = await until(
      'no link or address left on any node',
      () => {
        const all = c.nodes.flatMap(leftOn);
        return all.length === 0 ? all : undefined;
      },
      60000,
      1000,
    ).catch((e: Error) => [e.message, ...c.nodes.flatMap(leftOn)]);
    assert.deepEqual(left, []);
    for (const n of c.nodes) await n.uninstallPlexus();
    const names = c.nodes.map((n) => `after-${n.name}`);
    for (const [i, n] of c.nodes.entries()) await createPod(c.api, NS, names[i]!, { nodeName: n.name });
    await until(
      'the pods made after the uninstall Running',
      async () => ((await listPods(c.api, NS)).every((p) => p.status?.phase === 'Running') ? true : undefined),
      90000,
      250,
    );
    for (const p of await listPods(c.api, NS)) assert.deepEqual(networkStatus(p), [], 'Plexus is not involved');
    assert.deepEqual(await sandboxFailures(c.api, NS), []);
  });
});
