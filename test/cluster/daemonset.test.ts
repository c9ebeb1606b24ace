/**
 * Proof 3 of issue 37: deploy/'s DaemonSet, from the image, across a 3-node cluster whose nodes already run pods on
 * their own network. The image (scripts/image.sh) and a second version of it are imported into every node's
 * containerd; deploy/crds and deploy/ are applied with kubectl, one set of host paths for every node (each node binds
 * its own directories over them, support/cluster/node-namespaces.ts), plexusd told the API relay is its in-cluster
 * API server (support/cluster/daemonset.ts). The DaemonSet rolls out on all three nodes; the pods made before keep
 * running and new pods get a secondary network (`lan`, macvlan with cluster IPAM). The image is then upgraded
 * (deploy/'s maxUnavailable 1) while a pod with `lan` is created on every node every ~1.5 s and the older ones are
 * deleted: no node is ever without a Ready plexusd but the one being replaced, no sandbox fails, every pod has `lan`.
 * Every pod deleted, nothing is left on any node (no link, no lease of the node network or of `lan`); after
 * `kubectl delete -f deploy/` and deploy/uninstall/, new pods run on the node network alone.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ROOT } from '../support/daemon';
import { clusterMissing, TestCluster } from '../support/cluster/cluster';
import {
  buildImageArchive,
  clusterManifests,
  daemonPods,
  DEPLOYED_IMAGE,
  NEXT_IMAGE,
  NEXT_VERSION,
  kubectl,
  rolloutPending,
} from '../support/cluster/daemonset';
import type { ClusterNode } from '../support/cluster/node';
import { boundSource } from '../support/cluster/node-namespaces';
import {
  addressesOn,
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
const NS = 'dsproof';
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

/** Waits until `name` runs `image` Ready on every node of the cluster. */
const waitRolledOut = (c: TestCluster, name: string, image: string, timeoutMs: number): Promise<true> =>
  until(
    `daemonset ${name} rolled out with ${image}`,
    async () => ((await rolloutPending(c.api, name, c.nodes.length, image)) === undefined ? true : undefined),
    timeoutMs,
    500,
  ).catch(async (e: Error) => {
    throw new Error(`${e.message}: ${await rolloutPending(c.api, name, c.nodes.length, image)}`);
  });

describe("deploy/'s DaemonSet installed, upgraded under churn and uninstalled across three nodes", { skip }, () => {
  let cluster: TestCluster | undefined;
  const work = mkdtempSync(join(tmpdir(), 'plexus-ds-cluster-'));
  const manifests = join(work, 'deploy');

  before(async () => {
    // The images are built while the cluster starts; a failed build is reported where it is awaited.
    const images = Promise.all([
      buildImageArchive(join(work, 'image')),
      buildImageArchive(join(work, 'next'), NEXT_VERSION),
    ]);
    images.catch(() => undefined);
    cluster = await TestCluster.start({ plexusAtStart: false });
    for (const archive of await images) cluster.importImage(archive);
    clusterManifests(manifests, cluster.apiRelay);
    await ensureNamespace(cluster.api, NS);
    assert.equal((await cluster.api.createNad(NS, 'lan', LAN)).status, 201);
  });
  after(async () => {
    try {
      assert.deepEqual((await cluster?.stop()) ?? [], []);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('rolls out on nodes that already run pods on their own network: those keep running, new pods get lan too', async () => {
    const c = cluster!;
    const before = c.nodes.flatMap((n) => [0, 1].map((i) => ({ n, name: `pre-${n.name}-${i}` })));
    for (const { n, name } of before) await createPod(c.api, NS, name, { nodeName: n.name });
    await until(
      'the pods made before Plexus Running',
      async () => ((await listPods(c.api, NS)).every((p) => p.status?.phase === 'Running') ? true : undefined),
      90000,
      250,
    );
    kubectl(c.api, ['apply', '-f', join(ROOT, 'deploy', 'crds')]);
    const applied = performance.now();
    kubectl(c.api, ['apply', '-f', manifests]);
    await waitRolledOut(c, 'plexus', DEPLOYED_IMAGE, 180000);
    console.log(
      `# DaemonSet applied to Ready on ${c.nodes.length} nodes: ${Math.round(performance.now() - applied)} ms`,
    );
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

  it('upgraded to a second image one node at a time while pods are created and deleted on every node: no sandbox fails', async () => {
    const c = cluster!;
    const patch = JSON.stringify({
      spec: {
        template: {
          spec: {
            initContainers: [{ name: 'install', image: NEXT_IMAGE }],
            containers: [{ name: 'plexusd', image: NEXT_IMAGE }],
          },
        },
      },
    });
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
    /** The most nodes seen at once without a Ready plexusd of the DaemonSet. */
    let mostDown = 0;
    try {
      await sleep(3000);
      const started = performance.now();
      kubectl(c.api, ['-n', 'kube-system', 'patch', 'daemonset', 'plexus', '--type', 'strategic', '-p', patch]);
      await until(
        `daemonset plexus rolled out with ${NEXT_IMAGE}`,
        async () => {
          const up = new Set(
            (await daemonPods(c.api, 'plexus')).filter((p) => p.ready && !p.deleting).map((p) => p.node),
          );
          mostDown = Math.max(mostDown, c.nodes.filter((n) => !up.has(n.name)).length);
          return (await rolloutPending(c.api, 'plexus', c.nodes.length, NEXT_IMAGE)) === undefined ? true : undefined;
        },
        240000,
        250,
      );
      console.log(`# rolling upgrade of ${c.nodes.length} nodes: ${Math.round(performance.now() - started)} ms`);
      await sleep(3000);
    } finally {
      churning = false;
      await churn;
    }
    // Pods whose DELETE the last waves sent are on their way out (deletionTimestamp set): not waited for.
    const left = (await listPods(c.api, NS))
      .filter((p) => p.metadata.deletionTimestamp === undefined)
      .map((p) => p.metadata.name)
      .filter((n) => n.startsWith('churn-'));
    const running = await waitRunning(c.api, NS, left, 120000);
    console.log(`# ${made.length} pods created across the upgrade, ${left.length} still running`);
    assert.deepEqual(await sandboxFailures(c.api, NS), []);
    assert.deepEqual(
      running.filter((p) => addressesOn(p, `${NS}/lan`).length !== 1).map((p) => p.metadata.name),
      [],
      'every pod made during the upgrade has its address on lan',
    );
    assert.equal(mostDown, 1, 'one node at a time without a Ready plexusd (maxUnavailable 1)');
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
    kubectl(c.api, ['delete', '-f', manifests, '--wait=true']);
    await until(
      'the DaemonSet pods gone',
      async () => ((await daemonPods(c.api, 'plexus')).length ? undefined : true),
      90000,
      500,
    );
    const uninstall = join(ROOT, 'deploy', 'uninstall');
    kubectl(c.api, ['apply', '-f', uninstall]);
    await waitRolledOut(c, 'plexus-uninstall', DEPLOYED_IMAGE, 90000);
    kubectl(c.api, ['delete', '-f', uninstall]);
    for (const n of c.nodes) {
      assert.deepEqual(
        readdirSync(n.paths.cniConfDir).filter((f) => f.includes('plexus')),
        [],
        `${n.name}: Plexus's conflist gone`,
      );
      assert.equal(readdirSync(n.paths.cniBinDir).includes('plexus-cni'), false, `${n.name}: the shim gone`);
    }
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
