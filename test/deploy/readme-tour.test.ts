/**
 * The README's cluster tour, its shell block run as written by bash on a one-node cluster of the harness
 * (kube-apiserver, etcd, kube-controller-manager, kube-scheduler, containerd, kubelet): the image built and
 * imported, deploy/ applied, a NAD, a pod with two networks, its network-status, plexusctl in plexusd's container.
 *
 * What differs from a real cluster is only where the harness's node keeps things, as in test/deploy/daemonset.test.ts:
 * the tour runs in a directory whose deploy/ is a copy with the node's private directories put in for the host's,
 * plexusd's container is given the API server's loopback address (NOTES.md section 10) and PLEXUS_SOCKET (its
 * socket's private path, for plexusctl), `ctr` on PATH talks to the node's containerd and `kubectl` is the harness's.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments, stringify } from 'yaml';
import { ROOT } from '../support/daemon';
import { k8sBinary } from '../support/k8s';
import { KubeNodeFixture, kubeNodeMissing } from '../support/kube-node';
import { ipTry, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { ClusterControlPlane } from '../support/control-plane';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const prefix = uniquePrefix('rt');
/** The bridge the tour's NAD makes on the node. */
const TOUR_BRIDGE = 'blue0';

const missing = (): string | undefined => {
  const node = kubeNodeMissing();
  if (node) return node;
  for (const b of ['kube-controller-manager', 'kube-scheduler', 'kubectl'])
    if (!k8sBinary(b)) return `not available: ${b} (in $PLEXUS_K8S_BIN or ../shared/k8s/bin)`;
  if (spawnSync('busybox', ['true']).status !== 0)
    return 'busybox not installed (the image needs it: apt-get install busybox-static)';
  if (ipTry('link', 'show', TOUR_BRIDGE).status === 0)
    return `the host already has a link ${TOUR_BRIDGE}, which the tour's NAD makes`;
  return undefined;
};

/** The first ```sh block of the README's "A cluster tour" section. */
function tourScript(): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## A cluster tour'));
  const block = /```sh\n([\s\S]*?)\n```/.exec(section.slice(0, section.indexOf('\n## ', 3)))?.[1];
  assert.ok(block, 'the README has a cluster tour');
  return block;
}

interface Obj {
  kind: string;
  spec?: { template: { spec: { initContainers: { command: string[] }[]; containers: { env?: unknown[] }[] } } };
}

describe(
  "the README's cluster tour, as written, on a real node",
  { skip: expectedPrerequisites(missing()), timeout: 900_000 },
  () => {
    let node: KubeNodeFixture;
    const controlPlane = new ClusterControlPlane();
    const work = mkdtempSync(join(tmpdir(), `plexus-tour-${prefix}-`));
    const binDir = join(work, 'cni-bin');
    const tourDir = join(work, 'tour');
    const toolDir = join(work, 'tools');
    let output = '';

    /** deploy/ as the tour applies it: the node's private directories for the host's, plus the harness's env. */
    function deployCopy(paths: Record<string, string>, socket: string): void {
      cpSync(join(ROOT, 'deploy'), join(tourDir, 'deploy'), { recursive: true });
      for (const f of ['10-rbac.yaml', '30-configmap.yaml', '40-daemonset.yaml']) {
        let text = readFileSync(join(tourDir, 'deploy', f), 'utf8');
        for (const [from, to] of Object.entries(paths)) text = text.split(from).join(to);
        if (f !== '40-daemonset.yaml') {
          writeFileSync(join(tourDir, 'deploy', f), text);
          continue;
        }
        const docs = parseAllDocuments(text).map((d) => d.toJSON() as Obj);
        const pod = docs.find((o) => o.kind === 'DaemonSet')!.spec!.template.spec;
        pod.initContainers[0]!.command.push(
          '--cni-bin-dir',
          paths['/opt/cni/bin']!,
          '--cni-conf-dir',
          paths['/etc/cni/net.d']!,
          '--default-network-link',
          join(paths['/var/lib/plexus']!, 'default-network'),
        );
        (pod.containers[0]!.env ??= []).push(
          { name: 'KUBERNETES_SERVICE_HOST', value: '127.0.0.1' },
          { name: 'KUBERNETES_SERVICE_PORT', value: String(node.api.apiPort) },
          { name: 'PLEXUS_SOCKET', value: socket },
        );
        writeFileSync(join(tourDir, 'deploy', f), docs.map((d) => stringify(d)).join('---\n'));
      }
    }

    before(async () => {
      mkdirSync(binDir);
      for (const f of readdirSync(DEBIAN_PLUGINS)) copyFileSync(join(DEBIAN_PLUGINS, f), join(binDir, f));
      const third = Math.floor(Math.random() * 200);
      node = await KubeNodeFixture.start({
        cniBinDir: binDir,
        ownedLinks: [TOUR_BRIDGE],
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
                  ranges: [[{ subnet: `10.233.${third}.0/24` }]],
                  dataDir: join(root, 'var/lib/cni/networks'),
                },
              },
            ],
          }),
      });
      const certs = join(node.api.dir, 'certs');
      // `kubectl exec` (step 6) goes from the API server to the kubelet, which needs a client certificate the harness's
      // API server is not given (NOTES.md section 2, --kubelet-client-*): restart it with the admin's (system:masters).
      // Reaching into the fixture is this test's stopgap until test/support/k8s.ts passes those flags itself.
      await node.api.stopApiServer();
      (node.api as unknown as { apiArgs: string[] }).apiArgs.push(
        `--kubelet-client-certificate=${join(certs, 'admin.crt')}`,
        `--kubelet-client-key=${join(certs, 'admin.key')}`,
      );
      await node.api.startApiServer();
      controlPlane.start(node.api, work);

      // Sandboxes' netns are bind mounts containerd makes under its state dir: shared, so plexusd's container sees them.
      const netnsDir = join(node.dir, 'run/containerd/io.containerd.grpc.v1.cri/netns');
      mkdirSync(netnsDir, { recursive: true });
      execFileSync('mount', ['--bind', netnsDir, netnsDir]);
      execFileSync('mount', ['--make-shared', netnsDir]);
      const paths: Record<string, string> = {
        '/opt/cni/bin': binDir,
        '/etc/cni/net.d': node.cniConfDir,
        '/run/plexus': join(node.dir, 'run/plexus'),
        '/var/lib/plexus': join(node.dir, 'var/lib/plexus'),
        '/var/run/netns': netnsDir,
        '/run/netns': netnsDir,
        '/var/run/k8s.cni.cncf.io/devinfo': join(node.dir, 'run/devinfo'),
        '/var/run/openvswitch': join(node.dir, 'run/openvswitch'),
      };
      mkdirSync(tourDir);
      deployCopy(paths, join(paths['/run/plexus']!, 'plexus.sock'));
      for (const d of ['scripts', 'dist', 'bin', 'package.json', 'node_modules'])
        symlinkSync(join(ROOT, d), join(tourDir, d));
      mkdirSync(toolDir);
      writeFileSync(
        join(toolDir, 'ctr'),
        `#!/bin/sh\nexec ${execFileSync('sh', ['-c', 'command -v ctr'], { encoding: 'utf8' }).trim()} --address ${node.containerdSocket} "$@"\n`,
        { mode: 0o755 },
      );
      symlinkSync(k8sBinary('kubectl')!, join(toolDir, 'kubectl'));
    });

    after(async () => {
      try {
        if (node) {
          await node.call('DELETE', '/api/v1/namespaces/default/pods/demo?gracePeriodSeconds=0').catch(() => undefined);
          await node
            .call('DELETE', '/apis/apps/v1/namespaces/kube-system/daemonsets/plexus?propagationPolicy=Foreground')
            .catch(() => undefined);
          const dsPods = async (): Promise<number> =>
            (
              (
                await node.call(
                  'GET',
                  '/api/v1/namespaces/kube-system/pods?labelSelector=app.kubernetes.io%2Fname%3Dplexus',
                )
              ).body as { items?: unknown[] }
            ).items?.length ?? 0;
          for (let i = 0; i < 120 && (await dsPods().catch(() => 0)) > 0; i++)
            await new Promise((r) => setTimeout(r, 500));
        }
      } finally {
        await controlPlane.stop();
        if (node) assert.deepEqual(await node.stop(), []);
        rmSync(work, { recursive: true, force: true });
      }
    });

    it('runs every step, to a pod whose network-status lists both networks and a plexusctl show of it', async () => {
      const started = Date.now();
      const run = spawnSync('bash', ['-euo', 'pipefail', '-c', tourScript()], {
        cwd: tourDir,
        encoding: 'utf8',
        timeout: 600_000,
        maxBuffer: 32 << 20,
        env: {
          ...process.env,
          PATH: `${toolDir}:${process.env.PATH ?? ''}`,
          KUBECONFIG: node.api.kubeconfig,
          PLEXUS_IMAGE_SKIP_BUILD: '1',
        },
      });
      output = `${run.stdout}\n${run.stderr}`;
      process.stdout.write(`# README tour: ${((Date.now() - started) / 1000).toFixed(1)} s, exit ${run.status}\n`);
      assert.equal(run.status, 0, `${output.slice(-6000)}\n${node.logTail('kubelet', 20)}`);
      assert.match(
        output,
        /"name": "default\/blue",\s*"interface": "net1",\s*"ips": \[\s*"10\.77\.0\.\d+"/,
        'network-status names blue as net1, with its address',
      );
      assert.match(output, /"name": "podnet",\s*"interface": "eth0"/, 'and the cluster network as eth0');
      assert.match(
        output,
        /^\S+ eth0 {2}pod default\/demo {2}netns \S+ {2}attached$/m,
        'plexusctl show of the demo pod',
      );
      assert.match(
        output,
        /^ {2}ip 10\.77\.0\.\d+\/24 gw 10\.77\.0\.1 on interface \d+$/m,
        'plexusctl show lists the address on blue',
      );
    });
  },
);
