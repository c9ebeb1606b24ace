/**
 * Hot-plug latency on a real kube-apiserver + etcd: the time from a pod's k8s.v1.cni.cncf.io/networks annotation
 * being changed (a merge PATCH, as `kubectl annotate --overwrite`) to its network-status annotation listing the
 * change, which plexusd writes after the interface is up in the pod's netns (checked for every change afterwards).
 * Pods alternate between adding and removing a network.
 *
 *   node dist/scripts/hotplug-bench.js [--changes N] [--json FILE]
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { apiClientFor, k8sMissing, k8sVersion, KubeApiFixture } from '../test/support/k8s';
import { referencePlugins } from '../test/support/plugin-dir';
import { invoke, newPod, type Plugin } from './lib/cni';
import {
  createNetns,
  deleteLinkIfPresent,
  freeTenNet,
  podLinks,
  restoreForwardingOnTeardown,
  uniquePrefix,
} from './lib/host';
import { Plexusd, shimBinary } from './lib/plexusd';
import { summarize } from './lib/stats';
import { Teardown } from './lib/teardown';

const NODE = 'hotplug-bench-node';
const NETWORKS = 'k8s.v1.cni.cncf.io/networks';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { changes: { type: 'string' }, json: { type: 'string' } } });
  const changes = Number(values.changes ?? 50);
  const missing = k8sMissing();
  if (missing) throw new Error(`cannot run: ${missing}`);
  const teardown = new Teardown();
  try {
    const prefix = uniquePrefix('hb');
    const net = freeTenNet(100, 250);
    restoreForwardingOnTeardown(teardown);
    const bridge = (name: string, i: number): string =>
      JSON.stringify({
        cniVersion: '1.0.0',
        name,
        type: 'bridge',
        bridge: `${prefix}b${i}`,
        isGateway: true,
        ipam: { type: 'host-local', ranges: [[{ subnet: `10.${net}.${i * 16}.0/20` }]] },
      });
    for (let i = 0; i < 2; i++)
      teardown.add(`delete bridge ${prefix}b${i}`, () => deleteLinkIfPresent(`${prefix}b${i}`));
    const api = await KubeApiFixture.startForPlexus();
    teardown.add('stop the API server and etcd', () => api.stop());
    for (const [i, name] of ['podnet', 'sec'].entries())
      if ((await api.createNad('default', name, bridge(name, i))).status !== 201) throw new Error(`NAD ${name}`);
    const root = await mkdtemp(join(tmpdir(), 'plexus-hotplug-bench-'));
    teardown.add(`remove ${root}`, () => rm(root, { recursive: true, force: true }));
    await mkdir(join(root, 'networks'));
    const daemon = await Plexusd.start(teardown, {
      root,
      networksDir: join(root, 'networks'),
      defaultNetwork: 'podnet',
      cniBinDir: referencePlugins(),
      logLevel: 'error',
      extraFlags: ['--kubeconfig', api.userKubeconfig('plexus'), '--node-name', NODE],
    });
    const client = apiClientFor(api.kubeconfig);
    teardown.add('close the API client', () => client.close());
    const plugin: Plugin = {
      binary: shimBinary(),
      env: { CNI_PATH: referencePlugins() },
      config: { cniVersion: '1.0.0', name: 'plexus', type: 'plexus-cni', socketPath: daemon.socket },
    };

    const podCount = Math.ceil(changes / 2);
    await api.createPod('default', `${prefix}-warm`, { nodeName: NODE });
    const pods = [];
    for (let i = 0; i < podCount; i++) {
      const name = `${prefix}-${i}`;
      const [path] = createNetns(teardown, [name]);
      const made = await api.createPod('default', name, { nodeName: NODE, annotations: { [NETWORKS]: '' } });
      const pod = { ...newPod('default', name, path!), uid: (made.body as { metadata: { uid: string } }).metadata.uid };
      const add = await invoke(plugin, 'ADD', pod);
      if (add.exitCode !== 0) throw new Error(`ADD ${name}: ${add.stdout}`);
      teardown.add(`DEL ${name}`, async () => void (await invoke(plugin, 'DEL', pod)));
      pods.push(pod);
    }
    await sleep(1000);
    const statusOf = async (name: string): Promise<string> => {
      const r = await client.request('GET', `/api/v1/namespaces/default/pods/${name}`, 'pods');
      return r.ok
        ? ((r.value as { metadata: { annotations?: Record<string, string> } }).metadata.annotations?.[
            'k8s.v1.cni.cncf.io/network-status'
          ] ?? '')
        : '';
    };
    const samples: number[] = [];
    for (let n = 0; n < changes; n++) {
      const pod = pods[n % podCount]!;
      const adding = n < podCount;
      const started = performance.now();
      const patched = await client.request('PATCH', `/api/v1/namespaces/default/pods/${pod.name}`, 'pods', {
        body: { metadata: { annotations: { [NETWORKS]: adding ? 'sec' : '' } } },
        contentType: 'application/merge-patch+json',
      });
      if (!patched.ok) throw new Error(`PATCH: ${patched.error.message}`);
      for (;;) {
        const listed = (await statusOf(pod.name)).includes('"net1"');
        if (listed === adding) break;
        if (performance.now() - started > 10_000) throw new Error(`${pod.name}: change ${n} not reported within 10 s`);
        await sleep(2);
      }
      samples.push(performance.now() - started);
      const links = podLinks(pod.name);
      if (links.includes('net1') !== adding)
        throw new Error(`${pod.name}: status says ${adding ? 'added' : 'removed'}, the netns has ${links.join(',')}`);
    }
    const report = {
      kubernetes: k8sVersion()?.text,
      changes: samples.length,
      ms: summarize(samples),
      plexusdPeakRssMiB: Math.round((daemon.peakRssKiB() ?? 0) / 1024),
    };
    console.log(JSON.stringify(report, null, 2));
    console.log(
      `annotation change to status written (interface up): median ${report.ms.median} ms, max ${report.ms.max} ms over ${report.changes} changes`,
    );
    if (values.json) await writeFile(values.json, JSON.stringify(report, null, 2));
  } finally {
    for (const p of await teardown.run()) console.error(`teardown: ${p}`);
  }
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.stack : e);
  process.exit(1);
});
