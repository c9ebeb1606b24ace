/**
 * deploy/ on a real node (kube-apiserver, etcd, kube-controller-manager, kube-scheduler, containerd, kubelet): the
 * image built by scripts/image.sh and imported, the manifests applied through the API with the node's private paths
 * put in for the host's, the DaemonSet Ready, Plexus's conflist written behind the node's own config, a pod with a
 * secondary network attached, and a rolling restart of the DaemonSet while pods are created costing no sandbox a
 * failure, with the existing pods adopted. Skips when the binaries are absent.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseAllDocuments } from 'yaml';
import { ROOT } from '../support/daemon';
import { k8sBinary, k8sBinaryMissing } from '../support/k8s';
import { HOST_LOCAL_DATA_DIR, hostLocalDataEntries } from '../support/kube-node';
import { SingleNode, singleNodeMissing } from '../support/cluster/single-node';
import { uniquePrefix } from '../support/netns';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';
import { containerdMajor } from '../support/containerd';
import { ClusterControlPlane } from '../support/control-plane';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';
import { answerWithin } from '../support/until';

const prefix = uniquePrefix('pd');
const PROBE_PORT = 9468;
const missing = (): string | undefined => {
  const node = singleNodeMissing();
  if (node) return node;
  for (const b of ['kube-controller-manager', 'kube-scheduler']) if (!k8sBinary(b)) return k8sBinaryMissing(b);
  try {
    execFileSync('busybox', ['true']);
  } catch {
    return 'busybox not installed (the image needs it: apt-get install busybox-static)';
  }
  return undefined;
};

interface Obj {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  [key: string]: unknown;
}

const PATHS: Record<string, string> = {};

/** The REST collection of an object of deploy/. */
function collection(o: Obj): string {
  const [group, version] = o.apiVersion.includes('/') ? o.apiVersion.split('/') : ['', o.apiVersion];
  const plural = {
    ServiceAccount: 'serviceaccounts',
    ConfigMap: 'configmaps',
    DaemonSet: 'daemonsets',
    ClusterRole: 'clusterroles',
    ClusterRoleBinding: 'clusterrolebindings',
    Role: 'roles',
    RoleBinding: 'rolebindings',
  }[o.kind];
  if (!plural) throw new Error(`no collection for ${o.kind}`);
  const base = group ? `/apis/${group}/${version}` : `/api/${version}`;
  return o.metadata.namespace ? `${base}/namespaces/${o.metadata.namespace}/${plural}` : `${base}/${plural}`;
}

function getHttp(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'GET', timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('deploy/ on a real node', { skip: expectedPrerequisites(missing()) }, () => {
  let node: SingleNode;
  const controlPlane = new ClusterControlPlane();
  const work = mkdtempSync(join(tmpdir(), `plexus-ds-${prefix}-`));
  const binDir = join(work, 'cni-bin');
  let imageArchive = '';
  /** The image the DaemonSet is upgraded to under churn: the same build under another version and tag. */
  const NEXT_IMAGE = 'local.test/plexus:0.1.1-upgrade';
  let readyMs = 0;
  let dsPodBefore = '';
  /** The deployed plexusd shares host-local's leases on the host's dataDir: the node must leave it as it was. */
  const dataDirBefore = hostLocalDataEntries();

  const call = (method: string, path: string, body?: unknown, type?: string) => node.call(method, path, body, type);
  const dsStatus = async (): Promise<{
    desired: number;
    ready: number;
    updated: number;
    generation: number;
    observed: number;
  }> => {
    const r = await call('GET', '/apis/apps/v1/namespaces/kube-system/daemonsets/plexus');
    const b = r.body as {
      metadata: { generation: number };
      status?: {
        desiredNumberScheduled?: number;
        numberReady?: number;
        updatedNumberScheduled?: number;
        observedGeneration?: number;
      };
    };
    return {
      desired: b.status?.desiredNumberScheduled ?? 0,
      ready: b.status?.numberReady ?? 0,
      updated: b.status?.updatedNumberScheduled ?? 0,
      generation: b.metadata.generation,
      observed: b.status?.observedGeneration ?? 0,
    };
  };
  const dsPods = async (): Promise<{ name: string; ready: boolean; deleting: boolean }[]> => {
    const r = await call('GET', '/api/v1/namespaces/kube-system/pods?labelSelector=app.kubernetes.io%2Fname%3Dplexus');
    const items =
      (
        r.body as {
          items?: {
            metadata: { name: string; deletionTimestamp?: string };
            status?: { conditions?: { type: string; status: string }[] };
          }[];
        }
      ).items ?? [];
    return items.map((p) => ({
      name: p.metadata.name,
      deleting: !!p.metadata.deletionTimestamp,
      ready: (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'),
    }));
  };
  /** The images the DaemonSet's pod runs, as the kubelet reports them: its installer's, then plexusd's. */
  const dsImages = async (): Promise<string[]> => {
    const r = await call('GET', '/api/v1/namespaces/kube-system/pods?labelSelector=app.kubernetes.io%2Fname%3Dplexus');
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
  /** Waits until the DaemonSet's current generation runs Ready on the node, with no old pod left. */
  const waitRolledOut = async (timeoutMs: number): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const s = await dsStatus();
      const pods = await dsPods();
      if (
        s.observed >= s.generation &&
        s.desired === 1 &&
        s.ready === 1 &&
        s.updated === 1 &&
        pods.length === 1 &&
        pods[0]!.ready
      )
        return;
      if (Date.now() > deadline) {
        const logs = await Promise.all(
          pods.map((p) =>
            call('GET', `/api/v1/namespaces/kube-system/pods/${p.name}/log?container=plexusd&tailLines=20`)
              .then((l) => String(l.body))
              .catch(() => ''),
          ),
        );
        throw new Error(
          `DaemonSet not rolled out after ${timeoutMs} ms: ${JSON.stringify(s)} ${JSON.stringify(pods)}\n${await node.describePods(
            'kube-system',
            pods.map((p) => p.name),
          )}\n${logs.join('\n')}\n${node.logTail('kubelet', 20)}`,
        );
      }
      await sleep(250);
    }
  };

  /**
   * Deletes the test's pods (namespace default) and waits until their sandboxes are stopped (their CNI DEL done).
   * Not node.deleteAllPods: it waits for every sandbox, the DaemonSet's own included.
   */
  const deleteTestPods = async (timeoutMs = 120000): Promise<void> => {
    await call('DELETE', '/api/v1/namespaces/default/pods');
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const left =
        ((await call('GET', '/api/v1/namespaces/default/pods')).body as { items?: unknown[] }).items?.length ?? 0;
      const ready = (await node.sandboxes()).filter((x) => x.namespace === 'default' && x.ready).length;
      if (left === 0 && ready === 0) return;
      if (Date.now() > deadline)
        throw new Error(`${left} pods and ${ready} ready sandboxes left in default after ${timeoutMs} ms`);
      await sleep(250);
    }
  };

  before(async () => {
    mkdirSync(binDir);
    // Copies, not links: plexusd in its container runs the node network's own plugins from this directory.
    for (const f of readdirSync(DEBIAN_PLUGINS)) copyFileSync(join(DEBIAN_PLUGINS, f), join(binDir, f));
    imageArchive = execFileSync('bash', [join(ROOT, 'scripts/image.sh'), '--out', work], {
      encoding: 'utf8',
      env: { ...process.env, PLEXUS_IMAGE_SKIP_BUILD: '1' },
      maxBuffer: 16 << 20,
    })
      .trim()
      .split('\n')
      .at(-1)!;
    const third = Math.floor(Math.random() * 200);
    node = await SingleNode.start({
      cniBinDir: binDir,
      ownedLinks: [`${prefix}s0`],
      // The node's own network, as a cluster's network plugin would have written it.
      cniConfList: (root) =>
        JSON.stringify({
          cniVersion: '1.0.0',
          name: 'podnet',
          plugins: [
            {
              type: 'bridge',
              bridge: `${prefix}p0`,
              isGateway: true,
              ipMasq: false,
              ipam: {
                type: 'host-local',
                ranges: [[{ subnet: `10.231.${third}.0/24` }]],
                dataDir: join(root, 'var/lib/cni/networks'),
              },
            },
          ],
        }),
    });
    const api = node.api;
    // The DaemonSet controller and the scheduler (DaemonSet pods are scheduled), as NOTES.md section 2 runs them.
    controlPlane.start(api, work);

    const imported = node.ctr(['images', 'import', imageArchive]);
    assert.equal(imported.status, 0, imported.out);
    const nextArchive = execFileSync('bash', [join(ROOT, 'scripts/image.sh'), '--out', join(work, 'next')], {
      encoding: 'utf8',
      env: { ...process.env, PLEXUS_IMAGE_SKIP_BUILD: '1', PLEXUS_IMAGE_VERSION: '0.1.1-upgrade' },
      maxBuffer: 16 << 20,
    })
      .trim()
      .split('\n')
      .at(-1)!;
    const importedNext = node.ctr(['images', 'import', nextArchive]);
    assert.equal(importedNext.status, 0, importedNext.out);

    // Sandboxes' netns are bind mounts containerd makes under its state dir; a shared mount there is what lets them
    // reach plexusd's container (HostToContainer), as / is shared on a systemd host.
    const netnsDir = join(node.dir, 'run/containerd/io.containerd.grpc.v1.cri/netns');
    mkdirSync(netnsDir, { recursive: true });
    execFileSync('mount', ['--bind', netnsDir, netnsDir]);
    execFileSync('mount', ['--make-shared', netnsDir]);
    Object.assign(PATHS, {
      '/opt/cni/bin': binDir,
      '/etc/cni/net.d': node.cniConfDir,
      '/run/plexus': join(node.dir, 'run/plexus'),
      '/var/lib/plexus': join(node.dir, 'var/lib/plexus'),
      '/var/run/netns': netnsDir,
      '/run/netns': netnsDir,
      '/var/run/k8s.cni.cncf.io/devinfo': join(node.dir, 'run/devinfo'),
      '/var/run/cdi': node.cdiDir,
    });
  });

  after(async () => {
    try {
      if (node) {
        await deleteTestPods().catch(() => undefined); // while plexusd runs: their DELs go through it
        await call(
          'DELETE',
          '/apis/apps/v1/namespaces/kube-system/daemonsets/plexus?propagationPolicy=Foreground',
        ).catch(() => undefined);
        for (let i = 0; i < 60 && (await dsPods().catch(() => [])).length; i++) await sleep(500);
      }
    } finally {
      await controlPlane.stop();
      if (node) {
        const problems = await node.stop();
        assert.deepEqual(problems, []);
        assert.deepEqual(hostLocalDataEntries(), dataDirBefore, `what the node left under ${HOST_LOCAL_DATA_DIR}`);
      }
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('applies deploy/ and the DaemonSet becomes Ready', async () => {
    await node.api.installCrds('deploy/crds/00-crd-network-attachment-definition.yaml');
    await node.api.installCrds('deploy/crds/20-crd-ipam.yaml');
    const objects: Obj[] = [];
    for (const f of ['10-rbac.yaml', '30-configmap.yaml', '40-daemonset.yaml']) {
      // The node's private directories for the host's; the API server on loopback for the Service's ClusterIP.
      let text = readFileSync(join(ROOT, 'deploy', f), 'utf8');
      for (const [from, to] of Object.entries(PATHS)) text = text.split(from).join(to);
      objects.push(...parseAllDocuments(text).map((d) => d.toJSON() as Obj));
    }
    const ds = objects.find((o) => o.kind === 'DaemonSet') as Obj & {
      spec: { template: { spec: { initContainers: { command: string[] }[]; containers: { env: unknown[] }[] } } };
    };
    ds.spec.template.spec.initContainers[0]!.command.push(
      '--cni-bin-dir',
      PATHS['/opt/cni/bin']!,
      '--cni-conf-dir',
      PATHS['/etc/cni/net.d']!,
      '--default-network-link',
      join(PATHS['/var/lib/plexus']!, 'default-network'),
    );
    ds.spec.template.spec.containers[0]!.env.push(
      { name: 'KUBERNETES_SERVICE_HOST', value: '127.0.0.1' },
      { name: 'KUBERNETES_SERVICE_PORT', value: String(node.api.apiPort) },
    );
    const applied = performance.now();
    for (const o of objects) {
      const r = await call('POST', collection(o), o);
      assert.ok(
        r.status === 201 || r.status === 409,
        `${o.kind} ${o.metadata.name}: ${r.status} ${JSON.stringify(r.body).slice(0, 400)}`,
      );
    }
    await waitRolledOut(120000);
    readyMs = performance.now() - applied;
    dsPodBefore = (await dsPods())[0]!.name;
    process.stdout.write(`# DaemonSet applied to Ready: ${Math.round(readyMs)} ms\n`);
    const conflist = JSON.parse(readFileSync(join(node.cniConfDir, '00-plexus.conflist'), 'utf8')) as {
      cniVersion: string;
      plugins: { type: string }[];
    };
    const runtimeReads = containerdMajor() >= 2 ? '1.1.0' : '1.0.0';
    assert.equal(conflist.cniVersion, runtimeReads, "the highest version the node's containerd reads");
    assert.equal(conflist.plugins[0]?.type, 'plexus-cni');
    assert.ok(existsSync(join(binDir, 'plexus-cni')));
    const metrics = await getHttp(PROBE_PORT, '/metrics');
    assert.equal(metrics.status, 200);
    assert.match(metrics.body, /process_resident_memory_bytes/);
  });

  it("gives a pod its secondary network, with the node's own network as eth0", async () => {
    assert.ok(dsPodBefore, 'the DaemonSet is Ready');
    const nad = await node.api.createNad(
      'default',
      'sec',
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'sec',
        type: 'bridge',
        bridge: `${prefix}s0`,
        ipam: { type: 'host-local', ranges: [[{ subnet: '10.232.0.0/24' }]] },
      }),
    );
    assert.equal(nad.status, 201, JSON.stringify(nad.body));
    const names = await node.createPods(2, {
      namePrefix: 'multi-',
      annotations: { 'k8s.v1.cni.cncf.io/networks': 'sec' },
    });
    await node.waitAllRunning(names, 60000);
    const statusOf = async (): Promise<string | undefined> =>
      (await node.pod('default', names[0]!)).metadata.annotations?.['k8s.v1.cni.cncf.io/network-status'];
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
    const imageBefore = await dsImages();
    assert.ok(
      imageBefore.every((i) => i !== NEXT_IMAGE),
      `runs the first version: ${imageBefore.join(', ')}`,
    );
    const patched = await call(
      'PATCH',
      '/apis/apps/v1/namespaces/kube-system/daemonsets/plexus',
      {
        spec: {
          template: {
            spec: {
              initContainers: [{ name: 'install', image: NEXT_IMAGE }],
              containers: [{ name: 'plexusd', image: NEXT_IMAGE }],
            },
          },
        },
      },
      'application/strategic-merge-patch+json',
    );
    assert.equal(patched.status, 200, JSON.stringify(patched.body).slice(0, 300));
    // Churn: pods created in waves while the old plexusd drains and the new one starts.
    const waves: string[] = [];
    for (let w = 0; w < 5; w++) {
      waves.push(
        ...(await node.createPods(10, {
          namePrefix: `churn${w}-`,
          annotations: { 'k8s.v1.cni.cncf.io/networks': 'sec' },
          concurrency: 5,
        })),
      );
      await sleep(400);
    }
    await waitRolledOut(180000);
    const after = (await dsPods())[0]!.name;
    assert.notEqual(after, dsPodBefore, 'a new plexusd pod');
    assert.deepEqual(
      await dsImages(),
      [NEXT_IMAGE, NEXT_IMAGE],
      'the new pod runs the new version, installer and daemon',
    );
    const timings = await node.waitAllRunning(waves, 180000);
    process.stdout.write(
      `# rollout under churn: ${waves.length} pods Running, p50 ${Math.round(timings.p50Ms)} ms, p95 ${Math.round(timings.p95Ms)} ms, sandbox failures ${timings.sandboxFailures}\n`,
    );
    assert.equal(timings.sandboxFailures, 0, timings.failureMessages.join('\n'));
    const metrics = await getHttp(PROBE_PORT, '/metrics');
    const sec = /^plexus_attachments\{network="default\/sec"\} (\d+)$/m.exec(metrics.body);
    assert.equal(
      Number(sec?.[1]),
      waves.length + 2,
      "every pod's attachment is in the new daemon's journal, the two made before it included",
    );
    const rss = /^process_resident_memory_bytes (\d+)/m.exec(metrics.body);
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
        const names = await node.createPods(Math.min(50, soakPods - made), {
          namePrefix: `soak${w}-`,
          annotations: { 'k8s.v1.cni.cncf.io/networks': 'sec' },
          concurrency: 10,
        });
        const t = await node.waitAllRunning(names, 300000);
        assert.equal(t.sandboxFailures, 0, t.failureMessages.join('\n'));
        await deleteTestPods();
      }
      const metrics = (await getHttp(PROBE_PORT, '/metrics')).body;
      const rss = Number(/^process_resident_memory_bytes (\d+)/m.exec(metrics)?.[1]);
      process.stdout.write(
        `# plexusd RSS in the pod after ${soakPods + 52} pod creations (all deleted): ${(rss / 1048576).toFixed(1)} MiB\n`,
      );
      assert.match(metrics, /^plexus_journal_records 0$/m);
    },
  );

  it("deletes every pod with nothing left, and after uninstall new pods get the node's own network", async () => {
    assert.ok(dsPodBefore, 'the DaemonSet is Ready');
    await deleteTestPods();
    const metrics = await getHttp(PROBE_PORT, '/metrics');
    assert.match(metrics.body, /^plexus_journal_records 0$/m);
    const leases = (network: string): string[] => {
      try {
        return readdirSync(join(PATHS['/var/lib/plexus']!, 'ipam', network)).filter(
          (n) => !n.startsWith('last_reserved') && !n.startsWith('.'),
        );
      } catch {
        return [];
      }
    };
    assert.deepEqual(leases('sec'), []);
    for (const bridge of [`${prefix}s0`, `${prefix}p0`])
      assert.equal(
        execFileSync('ip', ['-o', 'link', 'show', 'master', bridge], { encoding: 'utf8' }).trim(),
        '',
        `ports left on ${bridge}`,
      );

    // Uninstall: the DaemonSet goes, then deploy/uninstall/ gives the node its own config back.
    const primary = join(node.cniConfDir, '10-test.conflist');
    const primaryBefore = readFileSync(primary);
    assert.equal((await call('DELETE', '/apis/apps/v1/namespaces/kube-system/daemonsets/plexus')).status, 200);
    for (let i = 0; i < 120 && (await dsPods()).length; i++) await sleep(250);
    let text = readFileSync(join(ROOT, 'deploy/uninstall/plexus-uninstall.yaml'), 'utf8');
    for (const [from, to] of Object.entries(PATHS)) text = text.split(from).join(to);
    const ds = parseAllDocuments(text)[0]!.toJSON() as Obj & {
      spec: { template: { spec: { initContainers: { command: string[] }[] } } };
    };
    ds.spec.template.spec.initContainers[0]!.command.push(
      '--cni-bin-dir',
      PATHS['/opt/cni/bin']!,
      '--cni-conf-dir',
      PATHS['/etc/cni/net.d']!,
    );
    assert.equal((await call('POST', collection(ds), ds)).status, 201);
    const deadline = Date.now() + 60000;
    for (;;) {
      const r = await call('GET', '/apis/apps/v1/namespaces/kube-system/daemonsets/plexus-uninstall');
      if ((r.body as { status?: { numberReady?: number } }).status?.numberReady === 1) break;
      assert.ok(
        Date.now() < deadline,
        `plexus-uninstall not Ready: ${JSON.stringify((r.body as { status?: unknown }).status)}`,
      );
      await sleep(250);
    }
    assert.equal(existsSync(join(node.cniConfDir, '00-plexus.conflist')), false);
    assert.equal(existsSync(join(binDir, 'plexus-cni')), false);
    assert.deepEqual(readFileSync(primary), primaryBefore, "the node's own config is as it was");
    const names = await node.createPods(2, { namePrefix: 'after-' });
    await node.waitAllRunning(names, 60000);
    const pod = await node.pod('default', names[0]!);
    assert.match(pod.status?.podIP ?? '', /^10\.231\./, "eth0 from the node's own network");
    assert.equal(pod.metadata.annotations?.['k8s.v1.cni.cncf.io/network-status'], undefined, 'Plexus is not involved');
    await call('DELETE', '/apis/apps/v1/namespaces/kube-system/daemonsets/plexus-uninstall');
  });
});
