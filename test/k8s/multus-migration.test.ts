/**
 * Moving a real node off Multus: a kubelet + containerd node (SingleNode: a one-node test cluster, its own network and
 * mount namespaces) whose runtime calls the real Multus v4.3.0 (thin, then thick with its daemon on the node, as
 * support/cluster/multus.ts runs it) for 10 pods with two secondary networks (bridge and macvlan, host-local), then
 * Plexus installed as docs/migrate-from-multus.md says while pods are created and deleted, plexusd on the node: no
 * sandbox fails, pods made after the takeover get their networks from Plexus, deleting the pods Multus made leaves none
 * of their leases or the node's links, and uninstall gives Multus its config back byte for byte.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { runInstall } from '../../src/install/main';
import { DaemonFixture, ROOT, SHIM } from '../support/daemon';
import { ThickMultus } from '../support/cluster/multus';
import { boundSource } from '../support/cluster/node-namespaces';
import { SingleNode, singleNodeMissing } from '../support/cluster/single-node';
import { grantMultus, multusMissing, multusPluginDir } from '../support/multus';
import { holdsWithin, until } from '../support/until';
import { ip, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';

const skip = expectedPrerequisites(singleNodeMissing(), multusMissing());
const prefix = uniquePrefix('mm');
const NETWORKS = 'k8s.v1.cni.cncf.io/networks';
const o = 100 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
const uplink = `${prefix}up`;

/** The ADDs plexusd answered, from its /metrics. */
function addsServed(socketPath: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path: '/metrics' }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () =>
        resolve(
          Number(/^plexus_cni_request_duration_seconds_count\{[^}]*command="ADD"[^}]*\} (\d+)/m.exec(text)?.[1] ?? 0),
        ),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

/** The addresses each pod has on the secondary networks (sec, mv), as its network-status says. */
async function secondaryAddresses(
  node: SingleNode,
  pods: readonly string[],
): Promise<{ pod: string; address: string }[]> {
  const list = await node.call('GET', '/api/v1/namespaces/default/pods');
  type Pod = { metadata: { name: string; annotations?: Record<string, string> } };
  const items = ((list.body as { items?: Pod[] }).items ?? []).filter((p) => pods.includes(p.metadata.name));
  return items.flatMap((p) => {
    const status = JSON.parse(p.metadata.annotations?.['k8s.v1.cni.cncf.io/network-status'] ?? '[]') as {
      name: string;
      ips?: string[];
    }[];
    return status
      .filter((n) => n.name === 'default/sec' || n.name === 'default/mv')
      .flatMap((n) => (n.ips ?? []).map((address) => ({ pod: p.metadata.name, address })));
  });
}

for (const mode of ['thin', 'thick'] as const)
  describe(`a ${mode} Multus node taken over by Plexus while pods come and go`, { skip }, () => {
    let node: SingleNode;
    let daemon: DaemonFixture;
    let dir: string;
    let binDir: string;
    let leaseDir: string;
    let multusCache: string;
    let multusConf: string;
    let multusPods: string[] = [];
    /** The cluster network's leases of the pods Multus made, right after their ADDs (lease files are named by IP). */
    let multusPodnetLeases: string[] = [];
    let multusDaemon: ThickMultus | undefined;
    let daemonConfig = '';
    const leases = (network: string): string[] => {
      try {
        return readdirSync(join(leaseDir, network)).filter((f) => /^\d/.test(f));
      } catch {
        return [];
      }
    };
    /** The veths on the secondary bridge, in the node's network namespace. */
    const nodeVeths = (): string[] =>
      ip('-n', node.netns, '-o', 'link', 'show', 'master', `${prefix}b1`).split('\n').filter(Boolean);

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'plexus-mm-'));
      binDir = join(dir, 'bin');
      leaseDir = join(dir, 'leases');
      multusPluginDir(binDir);
      copyFileSync(SHIM, join(binDir, 'plexus-cni'));
      const podnet = {
        cniVersion: '1.0.0',
        name: 'podnet',
        plugins: [
          {
            type: 'bridge',
            bridge: `${prefix}b0`,
            ipam: { type: 'host-local', dataDir: leaseDir, ranges: [[{ subnet: `10.${o}.${t}.0/24` }]] },
          },
        ],
      };
      node = await SingleNode.start({ cniBinDir: binDir, cniConfList: JSON.stringify(podnet), prefix });
      // The macvlan network's master: a NIC of the node's (a veth in its namespace, which goes with it).
      ip('-n', node.netns, 'link', 'add', uplink, 'type', 'veth', 'peer', 'name', `${prefix}upp`);
      ip('-n', node.netns, 'link', 'set', uplink, 'up');
      const api = node.api;
      const nad = (name: string, config: Record<string, unknown>) =>
        api.createNad('default', name, JSON.stringify({ cniVersion: '1.0.0', name, ...config }));
      assert.equal(
        (
          await nad('sec', {
            type: 'bridge',
            bridge: `${prefix}b1`,
            ipam: { type: 'host-local', dataDir: leaseDir, ranges: [[{ subnet: `10.${o}.${t + 1}.0/24` }]] },
          })
        ).status,
        201,
      );
      assert.equal(
        (
          await nad('mv', {
            type: 'macvlan',
            master: uplink,
            mode: 'bridge',
            ipam: { type: 'host-local', dataDir: leaseDir, ranges: [[{ subnet: `10.${o}.${t + 2}.0/24` }]] },
          })
        ).status,
        201,
      );
      if (mode === 'thin') {
        // Multus thin, as its docs write it: the node's own config is the cluster network. It runs in the node and
        // reaches the API through the node's relay, with what the admin's kubeconfig gave it on the host.
        multusCache = join(dir, 'multus-cache');
        multusConf = `${JSON.stringify(
          {
            cniVersion: '1.0.0',
            name: 'multus-cni-network',
            type: 'multus',
            kubeconfig: node.nodeKubeconfig('multus', ['system:masters']),
            cniDir: multusCache,
            binDir,
            clusterNetwork: join(node.cniConfDir, '10-test.conflist'),
            capabilities: { 'io.kubernetes.cri.pod-annotations': true },
          },
          null,
          2,
        )}\n`;
        writeFileSync(join(node.cniConfDir, '00-multus.conf'), multusConf, { mode: 0o600 });
      } else {
        // Multus thick, as its DaemonSet runs it on the node (the cluster's way, support/cluster/multus.ts): the
        // daemon finds the node's config and generates 00-multus.conf; its cache is the node's /var/lib/cni/multus.
        multusDaemon = await ThickMultus.start(node.node, await grantMultus(api));
        multusCache = join(boundSource(node.dir, '/var/lib/cni'), 'multus');
        daemonConfig = multusDaemon.config;
        multusConf = readFileSync(join(node.cniConfDir, '00-multus.conf'), 'utf8');
      }
      daemon = new DaemonFixture(join(dir, 'state', 'default-network'), {
        importedConfig: join(dir, 'state', 'imported-config.json'),
        kubeconfig: node.nodeKubeconfig('plexus'),
        nodeName: node.nodeName,
        installCniConfig: join(node.cniConfDir, '00-plexus.conflist'),
        takeOverMultus: true,
        logLevel: 'info',
      });
      daemon.launcher = node.launcher; // plexusd runs on the node it takes over
    });
    after(async () => {
      // Multus's daemon, one of the node's, stops with it (after the sandboxes' DELs, which may need it).
      const problems = await node?.stop({ runtimeStopped: () => daemon?.stop() });
      await daemon?.stop();
      rmSync(dir, { recursive: true, force: true });
      assert.deepEqual(problems ?? [], []);
    });

    it('runs 10 pods with two secondary networks under Multus', async () => {
      await sleep(1500); // containerd picks up 00-multus.conf
      multusPods = await node.createPods(10, { namePrefix: 'under-multus-', annotations: { [NETWORKS]: 'sec,mv' } });
      const timings = await node.waitAllRunning(multusPods, 120_000);
      assert.equal(timings.sandboxFailures, 0, timings.failureMessages.join('; '));
      assert.equal(leases('sec').length, 10);
      assert.equal(leases('mv').length, 10);
      multusPodnetLeases = leases('podnet');
      assert.equal(multusPodnetLeases.length, 10);
      assert.equal(
        readdirSync(multusCache).filter((f) => f !== 'results').length,
        10,
        `Multus made them (its cache has each)${multusDaemon ? `: ${node.node.logTail('multus-daemon', 40)}` : ''}`,
      );
    });

    it('takes the node over while 20 pods are created and deleted, with no failed sandbox', async () => {
      const churned: string[] = [];
      let plexusServes = false;
      // Waves of 5 pods, each created, run and deleted: at least 4, and on until the runtime calls Plexus (at most 12),
      // so the takeover happens in the middle however fast the runtime runs the first waves.
      const churn = (async () => {
        for (let wave = 0; wave < 4 || (!plexusServes && wave < 12); wave++) {
          const names = await node.createPods(5, { namePrefix: `churn-${wave}-`, annotations: { [NETWORKS]: 'sec' } });
          churned.push(...names);
          await node.waitAllRunning(names, 120_000);
          for (const name of names) await node.call('DELETE', `/api/v1/namespaces/default/pods/${name}`);
        }
      })();
      await sleep(1000);
      // The documented steps: the installer carries Multus's settings over, plexusd takes over once ready.
      const installed = await runInstall(
        [
          'install',
          '--cni-conf-dir',
          node.cniConfDir,
          '--cni-bin-dir',
          binDir,
          '--shim',
          SHIM,
          '--default-network-link',
          join(dir, 'state', 'default-network'),
          '--imported-config',
          join(dir, 'state', 'imported-config.json'),
          '--multus-daemon-config',
          daemonConfig || join(dir, 'absent.json'),
          '--wait-seconds',
          '5',
        ],
        pino({ level: 'silent' }),
      );
      assert.equal(installed, 0);
      await daemon.start(60_000);
      assert.ok(!existsSync(join(node.cniConfDir, '00-multus.conf')), "Multus's config went aside");
      // The documented next step: Multus's DaemonSet goes once the node is taken over and the pod starts under way
      // through Multus at the takeover have finished. The runtime reloads its CNI config on its own schedule, so a
      // sandbox started just before still calls multus-shim, which needs the daemon (stopped at once, it answered one
      // such call EOF). Once the runtime calls Plexus, the calls it made before are done within a few seconds.
      await until(
        'the runtime to call Plexus',
        async () => ((await addsServed(daemon.socket)) > 0 ? true : undefined),
        60_000,
      );
      plexusServes = true;
      await sleep(3000);
      await multusDaemon?.stop();
      await churn;
      assert.ok(churned.length >= 20 && churned.length % 5 === 0, `${churned.length} pods churned`);
      assert.deepEqual(await node.sandboxFailures('default'), []);
      const servedByPlexus = await addsServed(daemon.socket);
      assert.ok(
        servedByPlexus > 0 && servedByPlexus < churned.length,
        `the takeover fell inside the churn: Plexus made ${servedByPlexus} of its ${churned.length} sandboxes, Multus the rest`,
      );
    });

    it('gives new pods their networks from Plexus, none an address a pod Multus made holds', async () => {
      const names = await node.createPods(4, { namePrefix: 'under-plexus-', annotations: { [NETWORKS]: 'sec,mv' } });
      await node.waitAllRunning(names, 60_000);
      const held = await secondaryAddresses(node, [...multusPods, ...names]);
      assert.equal(held.length, 2 * (multusPods.length + names.length), JSON.stringify(held));
      const seen = new Map<string, string>();
      const duplicates = held.flatMap(({ pod, address }) => {
        const other = seen.get(address);
        seen.set(address, pod);
        return other !== undefined ? [`${address} on ${other} and ${pod}`] : [];
      });
      assert.deepEqual(duplicates, [], 'no address is on two pods');
      const attachments = execFileSync(join(ROOT, 'bin/plexusctl'), ['--socket', daemon.socket, 'attachments'], {
        encoding: 'utf8',
      });
      for (const name of names) assert.match(attachments, new RegExp(`default/${name}\\s+\\S*sec\\S*mv`), attachments);
      for (const name of names) await node.call('DELETE', `/api/v1/namespaces/default/pods/${name}`);
    });

    it('kept the pods Multus made running through the takeover, none restarted', async () => {
      const list = await node.call('GET', '/api/v1/namespaces/default/pods');
      type Pod = {
        metadata: { name: string };
        status?: { phase?: string; containerStatuses?: { restartCount: number }[] };
      };
      const pods = ((list.body as { items?: Pod[] }).items ?? []).filter((p) => multusPods.includes(p.metadata.name));
      assert.equal(pods.length, 10);
      for (const p of pods) {
        assert.equal(p.status?.phase, 'Running', p.metadata.name);
        assert.deepEqual(
          (p.status?.containerStatuses ?? []).map((c) => c.restartCount),
          [0],
          p.metadata.name,
        );
      }
    });

    it('removes every lease and host link of the pods Multus made when they are deleted', async () => {
      for (const name of multusPods) await node.call('DELETE', `/api/v1/namespaces/default/pods/${name}`);
      await node.deleteAllPods(180_000);
      // The runtime's retry of a teardown that failed took longer than 30 s on containerd 2 in a full run under load
      // (2 of the cluster network's leases still there at 30 s); the kubelet's sandbox GC runs once a minute.
      // The cluster network is a .conflist file (clusterNetwork, as Multus's docs and its thick daemon set it), which
      // Multus v4.3.0 caches without its plugins' fields: each of these pods' DEL runs it with libcni's record of the
      // ADD, and succeeds the first time. The pods Multus itself deleted during the churn failed that network's DEL
      // there (Multus removes its cache after the first attempt); the runtime retries until Plexus serves the node.
      const podnetLeft = (): string[] => leases('podnet');
      const left = (): number => podnetLeft().length + leases('sec').length + leases('mv').length;
      await holdsWithin(() => left() === 0 && nodeVeths().length === 0, 120_000, 250);
      assert.deepEqual(podnetLeft(), [], `of the cluster network's leases of the pods Multus made`);
      const removals = daemon.stderr
        .split('\n')
        .filter((l) => l.includes('removed as Multus would have removed it') && l.includes('under-multus-'))
        .map((l) => JSON.parse(l) as { pod: string; failed: number });
      assert.equal(new Set(removals.map((r) => r.pod)).size, multusPods.length, daemon.stderr.slice(-3000));
      assert.deepEqual(
        removals.filter((r) => r.failed > 0).map((r) => r.pod),
        [],
        "every DEL of a pod Multus made succeeded at once, each network's plugins run with the config of its ADD",
      );
      assert.deepEqual(leases('sec'), []);
      assert.deepEqual(leases('mv'), []);
      assert.deepEqual(nodeVeths(), [], "no veth is left on the node's secondary bridge");
      assert.deepEqual(
        readdirSync(multusCache).filter((f) => f !== 'results'),
        [],
      );
    });

    it('gives Multus its config back byte for byte on uninstall', async () => {
      assert.equal(
        await runInstall(
          [
            'uninstall',
            '--cni-conf-dir',
            node.cniConfDir,
            '--cni-bin-dir',
            join(dir, 'uninstalled-bin'),
            '--imported-config',
            join(dir, 'state', 'imported-config.json'),
          ],
          pino({ level: 'silent' }),
        ),
        0,
      );
      assert.equal(readFileSync(join(node.cniConfDir, '00-multus.conf'), 'utf8'), multusConf);
      assert.ok(!existsSync(join(node.cniConfDir, '00-plexus.conflist')));
    });
  });
