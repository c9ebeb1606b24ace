/**
 * deploy/ on one real node: the test cluster with one node (support/cluster/, the run's containerd) that runs pods on
 * its own network (a bridge with host-local) before Plexus comes. The image built by scripts/image.sh is imported,
 * deploy/ applied with kubectl as written (the node's own directories are bound over its host paths,
 * support/cluster/node-namespaces.ts; plexusd told the API relay is its API server, support/cluster/daemonset.ts),
 * the DaemonSet Ready, Plexus's conflist written behind the node's own config at the version the node's runtime reads,
 * a pod with a secondary network attached, and an upgrade of the DaemonSet to a second image while pods are created
 * costing no sandbox a failure, with the pods made before adopted. Every pod deleted, nothing is left in plexusd's
 * journal or stores; after deploy/uninstall/ the node's own config is as it was, new pods get the node's own network,
 * and once they go the node holds no link, network namespace or address it did not have. The 3-node proof of the
 * same DaemonSet is test/cluster/daemonset.test.ts; this file checks what one node shows in detail.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ROOT } from '../support/daemon';
import { TestCluster } from '../support/cluster/cluster';
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
import { NodePods } from '../support/cluster/node-pods';
import { deleteAllPods, NETWORKS } from '../support/cluster/pods';
import { singleNodeMissing } from '../support/cluster/single-node';
import { CriRuntime } from '../support/kube-node';
import { ip, uniquePrefix } from '../support/netns';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';
import { answerWithin, until } from '../support/until';

const skip = expectedPrerequisites(singleNodeMissing());
/** deploy/'s metricsAddress: plexusd's probes and /metrics, on the node's loopback. */
const METRICS_URL = 'http://127.0.0.1:9468/metrics';
/** The secondary network: a bridge with host-local, both run by plexusd itself (its driver and its IPAM). */
const SEC_BRIDGE = 'sec0';
const SEC = JSON.stringify({
  cniVersion: '1.0.0',
  name: 'sec',
  type: 'bridge',
  bridge: SEC_BRIDGE,
  ipam: { type: 'host-local', ranges: [[{ subnet: '10.232.0.0/24' }]] },
});
/** The links the node has of its own (sec's bridge stays once made, as the bridge plugin leaves it). */
const NODE_LINKS = ['lo', 'uplink0', 'uplink1', 'cni0', SEC_BRIDGE];

/** Address files in a host-local store directory, none while it does not exist. */
const addressFiles = (dir: string): string[] => {
  try {
    return readdirSync(dir).filter((n) => !n.startsWith('last_reserved') && !n.startsWith('.') && n !== 'lock');
  } catch {
    return [];
  }
};

describe('deploy/ on a real node', { skip }, () => {
  let cluster: TestCluster | undefined;
  let node: ClusterNode;
  let pods: NodePods;
  const work = mkdtempSync(join(tmpdir(), 'plexus-ds-'));
  const manifests = join(work, 'deploy');
  let dsPodBefore = '';

  const api = (): TestCluster['api'] => cluster!.api;
  /** plexusd's /metrics as the kubelet's probes reach it (the node's loopback); fails unless it answers 200. */
  const metrics = (): string => {
    const r = node.run(['busybox', 'wget', '-q', '-O', '-', METRICS_URL]);
    assert.equal(r.status, 0, `GET ${METRICS_URL} on the node: ${r.out}`);
    return r.out;
  };
  /** The images the DaemonSet's live pod runs, as the kubelet reports them: its installer's, then plexusd's. */
  const runningImages = async (): Promise<string[]> => {
    const r = await api().request(
      'GET',
      '/api/v1/namespaces/kube-system/pods?labelSelector=app.kubernetes.io%2Fname%3Dplexus',
    );
    type Status = { image: string };
    const pod = (
      r.body as {
        items?: {
          metadata: { deletionTimestamp?: string };
          status?: { initContainerStatuses?: Status[]; containerStatuses?: Status[] };
        }[];
      }
    ).items?.find((p) => !p.metadata.deletionTimestamp);
    return [...(pod?.status?.initContainerStatuses ?? []), ...(pod?.status?.containerStatuses ?? [])].map(
      (c) => c.image,
    );
  };
  /** Waits until DaemonSet `name` runs `image` Ready on the node, no old pod left; else fails with plexusd's log. */
  const waitRolledOut = async (name: string, image: string, timeoutMs: number): Promise<void> => {
    const pending = (): Promise<string | undefined> => rolloutPending(api(), name, 1, image);
    const done = await answerWithin(async () => ((await pending()) === undefined ? true : undefined), timeoutMs, 250);
    if (done) return;
    const dsPods = await daemonPods(api(), name);
    const logs = await Promise.all(
      dsPods.map((p) =>
        api()
          .request('GET', `/api/v1/namespaces/kube-system/pods/${p.name}/log?container=plexusd&tailLines=20`)
          .then((l) => String(l.body))
          .catch(() => ''),
      ),
    );
    const described = await pods.describePods(
      'kube-system',
      dsPods.map((p) => p.name),
    );
    throw new Error(
      `${name} not rolled out with ${image} after ${timeoutMs} ms: ${await pending()}\n${described}\n${logs.join('\n')}\n${node.logTail('kubelet', 20)}`,
    );
  };
  /**
   * Deletes the test's pods (namespace default) and waits until their sandboxes are stopped (their CNI DEL done).
   * Not pods.deleteAllPods: that waits for every sandbox, the DaemonSet's own included.
   */
  const deleteTestPods = async (timeoutMs = 120000): Promise<void> => {
    await deleteAllPods(api(), 'default', timeoutMs);
    const cri = new CriRuntime(node.paths.containerdSocket);
    await until(
      "the default namespace's sandboxes stopped",
      async () => ((await cri.listSandboxes()).some((s) => s.namespace === 'default' && s.ready) ? undefined : true),
      timeoutMs,
      250,
    );
  };
  /** Links on the node beyond its own: with no pod left, each was left behind. */
  const linksLeft = (): string[] =>
    ip('-n', node.netns, '-o', 'link', 'show')
      .split('\n')
      .map((l) => /^\d+: ([^:@]+)/.exec(l)?.[1])
      .filter((l): l is string => l !== undefined && !NODE_LINKS.includes(l));

  before(async () => {
    // The images are built while the node starts; a failed build is reported where it is awaited.
    const images = Promise.all([
      buildImageArchive(join(work, 'image')),
      buildImageArchive(join(work, 'next'), NEXT_VERSION),
    ]);
    images.catch(() => undefined);
    cluster = await TestCluster.start({
      nodes: 1,
      prefix: uniquePrefix('pd'),
      plexusAtStart: false,
      runtime: "the run's pair",
    });
    node = cluster.nodes[0]!;
    pods = new NodePods(cluster.api, node.name, node.paths.containerdSocket, () => undefined);
    for (const archive of await images) cluster.importImage(archive);
    clusterManifests(manifests, cluster.apiRelay);
  });

  after(async () => {
    try {
      if (cluster) {
        await deleteTestPods().catch(() => undefined); // while plexusd runs, if it does: their DELs go through it
        for (const ds of ['plexus', 'plexus-uninstall'])
          await api()
            .request('DELETE', `/apis/apps/v1/namespaces/kube-system/daemonsets/${ds}?propagationPolicy=Foreground`)
            .catch(() => undefined);
        for (let i = 0; i < 60 && (await daemonPods(api(), 'plexus').catch(() => [])).length; i++) await sleep(500);
      }
    } finally {
      pods?.close();
      const problems = (await cluster?.stop()) ?? [];
      rmSync(work, { recursive: true, force: true });
      assert.deepEqual(problems, []);
    }
  });

  it("applies deploy/ and the DaemonSet becomes Ready, its conflist at the version the node's runtime reads", async () => {
    kubectl(api(), ['apply', '-f', join(ROOT, 'deploy', 'crds')]);
    const applied = performance.now();
    kubectl(api(), ['apply', '-f', manifests]);
    await waitRolledOut('plexus', DEPLOYED_IMAGE, 120000);
    process.stdout.write(`# DaemonSet applied to Ready: ${Math.round(performance.now() - applied)} ms\n`);
    dsPodBefore = (await daemonPods(api(), 'plexus'))[0]!.name;
    const conflist = JSON.parse(readFileSync(join(node.paths.cniConfDir, '00-plexus.conflist'), 'utf8')) as {
      cniVersion: string;
      plugins: { type: string }[];
    };
    const runtimeReads = (node.spec.containerdMajor ?? 2) >= 2 ? '1.1.0' : '1.0.0';
    assert.equal(conflist.cniVersion, runtimeReads, "the highest version the node's containerd reads");
    assert.equal(conflist.plugins[0]?.type, 'plexus-cni');
    assert.ok(existsSync(join(node.paths.cniBinDir, 'plexus-cni')), 'the shim in the node’s /opt/cni/bin');
    assert.match(metrics(), /process_resident_memory_bytes/);
  });

  it("gives a pod its secondary network, with the node's own network as eth0", async () => {
    assert.ok(dsPodBefore, 'the DaemonSet is Ready');
    const nad = await api().createNad('default', 'sec', SEC);
    assert.equal(nad.status, 201, JSON.stringify(nad.body));
    const names = await pods.createPods(2, { namePrefix: 'multi-', annotations: { [NETWORKS]: 'sec' } });
    await pods.waitAllRunning(names, 60000);
    const statusOf = async (): Promise<string | undefined> =>
      (await pods.pod('default', names[0]!)).metadata.annotations?.['k8s.v1.cni.cncf.io/network-status'];
    const text = await answerWithin(statusOf, 15000, 200);
    const status = JSON.parse(text ?? '[]') as { name: string; interface: string; ips: string[]; default?: boolean }[];
    assert.deepEqual(
      status.map((s) => [s.name, s.interface, !!s.default]),
      [
        ['podnet', 'eth0', true],
        ['default/sec', 'net1', false],
      ],
    );
    assert.match(status[1]!.ips[0]!, /^10\.232\.0\./);
  });

  it('upgrades the DaemonSet to another image version while pods are created: no sandbox fails, and the pods made before are adopted', async () => {
    assert.ok(dsPodBefore, 'the DaemonSet is Ready');
    const imageBefore = await runningImages();
    assert.ok(
      imageBefore.every((i) => i !== NEXT_IMAGE),
      `runs the first version: ${imageBefore.join(', ')}`,
    );
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
    kubectl(api(), ['-n', 'kube-system', 'patch', 'daemonset', 'plexus', '--type', 'strategic', '-p', patch]);
    // Churn: pods created in waves while the old plexusd drains and the new one starts.
    const waves: string[] = [];
    for (let w = 0; w < 5; w++) {
      waves.push(
        ...(await pods.createPods(10, {
          namePrefix: `churn${w}-`,
          annotations: { [NETWORKS]: 'sec' },
          concurrency: 5,
        })),
      );
      await sleep(400);
    }
    await waitRolledOut('plexus', NEXT_IMAGE, 180000);
    assert.notEqual((await daemonPods(api(), 'plexus'))[0]!.name, dsPodBefore, 'a new plexusd pod');
    assert.deepEqual(
      await runningImages(),
      [NEXT_IMAGE, NEXT_IMAGE],
      'the new pod runs the new version, installer and daemon',
    );
    const timings = await pods.waitAllRunning(waves, 180000);
    process.stdout.write(
      `# rollout under churn: ${waves.length} pods Running, p50 ${Math.round(timings.p50Ms)} ms, p95 ${Math.round(timings.p95Ms)} ms, sandbox failures ${timings.sandboxFailures}\n`,
    );
    assert.equal(timings.sandboxFailures, 0, timings.failureMessages.join('\n'));
    const text = metrics();
    const sec = /^plexus_attachments\{network="default\/sec"\} (\d+)$/m.exec(text);
    assert.equal(
      Number(sec?.[1]),
      waves.length + 2,
      "every pod's attachment is in the new daemon's journal, the two made before it included",
    );
    const rss = /^process_resident_memory_bytes (\d+)/m.exec(text);
    process.stdout.write(
      `# plexusd RSS in the pod after ${waves.length + 2} pods: ${(Number(rss?.[1]) / 1048576).toFixed(1)} MiB\n`,
    );
  });

  // The figure "daemon RSS after 500 pod creations": PLEXUS_DS_SOAK_PODS=500 (waves of 50, each deleted).
  const soakPods = Number(process.env.PLEXUS_DS_SOAK_PODS ?? 0);
  it(
    `creates and deletes ${soakPods} more pods with secondary networks, reporting plexusd's RSS`,
    { skip: optionalSkip(soakPods > 0 ? undefined : 'set PLEXUS_DS_SOAK_PODS=500 to run') },
    async () => {
      assert.ok(dsPodBefore, 'the DaemonSet is Ready');
      await deleteTestPods();
      for (let made = 0, w = 0; made < soakPods; made += 50, w++) {
        const names = await pods.createPods(Math.min(50, soakPods - made), {
          namePrefix: `soak${w}-`,
          annotations: { [NETWORKS]: 'sec' },
          concurrency: 10,
        });
        const t = await pods.waitAllRunning(names, 300000);
        assert.equal(t.sandboxFailures, 0, t.failureMessages.join('\n'));
        await deleteTestPods();
      }
      const text = metrics();
      const rss = Number(/^process_resident_memory_bytes (\d+)/m.exec(text)?.[1]);
      process.stdout.write(
        `# plexusd RSS in the pod after ${soakPods + 52} pod creations (all deleted): ${(rss / 1048576).toFixed(1)} MiB\n`,
      );
      assert.match(text, /^plexus_journal_records 0$/m);
    },
  );

  it("deletes every pod with nothing left, and after uninstall new pods get the node's own network and leave nothing", async () => {
    assert.ok(dsPodBefore, 'the DaemonSet is Ready');
    await deleteTestPods();
    assert.match(metrics(), /^plexus_journal_records 0$/m);
    const plexusStore = (network: string): string[] => addressFiles(join(node.paths.plexusState, 'ipam', network));
    const sharedStore = (network: string): string[] => addressFiles(join(node.hostLocalDataDir, network));
    for (const network of ['sec', 'podnet']) {
      assert.deepEqual(plexusStore(network), [], `plexusd's leases of ${network}`);
      assert.deepEqual(sharedStore(network), [], `${network}'s addresses in the node's /var/lib/cni/networks`);
    }
    for (const bridge of [SEC_BRIDGE, 'cni0'])
      assert.equal(ip('-n', node.netns, '-o', 'link', 'show', 'master', bridge).trim(), '', `ports left on ${bridge}`);

    // Uninstall: deploy/ goes, then deploy/uninstall/ gives the node its own config back.
    const primary = join(node.paths.cniConfDir, '10-podnet.conflist');
    const primaryBefore = readFileSync(primary);
    kubectl(api(), ['delete', '-f', manifests, '--wait=true']);
    await until(
      'the DaemonSet pods gone',
      async () => ((await daemonPods(api(), 'plexus')).length ? undefined : true),
      60000,
      250,
    );
    const uninstall = join(ROOT, 'deploy', 'uninstall');
    kubectl(api(), ['apply', '-f', uninstall]);
    await until(
      'plexus-uninstall rolled out',
      async () =>
        (await rolloutPending(api(), 'plexus-uninstall', 1, DEPLOYED_IMAGE)) === undefined ? true : undefined,
      60000,
      250,
    );
    assert.equal(existsSync(join(node.paths.cniConfDir, '00-plexus.conflist')), false);
    assert.equal(existsSync(join(node.paths.cniBinDir, 'plexus-cni')), false);
    assert.deepEqual(readFileSync(primary), primaryBefore, "the node's own config is as it was");
    const names = await pods.createPods(2, { namePrefix: 'after-' });
    await pods.waitAllRunning(names, 60000);
    const pod = await pods.pod('default', names[0]!);
    const ownNetwork = node.spec.podSubnet.replace(/\.0\/\d+$/, '.');
    assert.ok(
      pod.status?.podIP?.startsWith(ownNetwork),
      `eth0 ${pod.status?.podIP} from the node's own ${node.spec.podSubnet}`,
    );
    assert.equal(pod.metadata.annotations?.['k8s.v1.cni.cncf.io/network-status'], undefined, 'Plexus is not involved');
    kubectl(api(), ['delete', '-f', uninstall]);

    await deleteTestPods();
    assert.deepEqual(linksLeft(), [], 'links left on the node');
    assert.deepEqual(node.netnsLeft(), [], 'pod network namespaces left on the node');
    assert.deepEqual(sharedStore('podnet'), [], "podnet's addresses left in the node's /var/lib/cni/networks");
  });
});
