/**
 * What the Kubernetes API path costs a pod's ADD, on a real kube-apiserver + etcd (test/support/k8s-binaries.ts finds
 * them: v1.36 from ../shared/k8s by default; PLEXUS_STACK=1.35 or PLEXUS_K8S_BIN choose others):
 *  - latency: 1-interface ADDs through the shim, standalone plexusd vs plexusd on the API, interleaved, paired;
 *  - API requests per ADD, counted by the API server's own audit log (plexusd runs as its own user, with the RBAC of
 *    deploy/10-rbac.yaml), with a warm cache and with a cache miss, for pods of 1 and 3 interfaces.
 *
 *   node dist/scripts/api-bench.js [--iterations N] [--json FILE]
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { k8sMissing, k8sVersion, KubeApiFixture } from '../test/support/k8s';
import { referencePlugins } from '../test/support/plugin-dir';
import { teardownsSettled } from './lib/bench/del-teardown';
import { invoke, newPod, type Plugin, type Pod, POD_ANNOTATIONS_CAPABILITY } from './lib/cni';
import { createNetns, deleteLinkIfPresent, freeTenNet, restoreForwardingOnTeardown, uniquePrefix } from './lib/host';
import { Plexusd, shimBinary, writeNetworkDefinition } from './lib/plexusd';
import { summarize } from './lib/stats';
import { Teardown } from './lib/teardown';

const NODE = 'bench-node';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { iterations: { type: 'string' }, json: { type: 'string' } } });
  const iterations = Number(values.iterations ?? 200);
  const missing = k8sMissing();
  if (missing) throw new Error(`cannot run: ${missing}`);
  const teardown = new Teardown();
  try {
    const prefix = uniquePrefix('ab');
    const net = freeTenNet(100, 250);
    restoreForwardingOnTeardown(teardown);
    const bridge = (name: string, i: number): Record<string, unknown> => ({
      cniVersion: '1.0.0',
      name,
      type: 'bridge',
      bridge: `${prefix}b${i}`,
      isGateway: true,
      ipam: { type: 'host-local', ranges: [[{ subnet: `10.${net}.${i * 16}.0/20` }]] },
    });
    for (let i = 0; i < 3; i++)
      teardown.add(`delete bridge ${prefix}b${i}`, () => deleteLinkIfPresent(`${prefix}b${i}`));
    const api = await KubeApiFixture.start({ audit: true });
    teardown.add('stop the API server and etcd', () => api.stop());
    await api.installNadCrd();
    await api.grantPlexusRbac('plexus');
    const root = await mkdtemp(join(tmpdir(), 'plexus-api-bench-'));
    teardown.add(`remove ${root}`, () => rm(root, { recursive: true, force: true }));
    const networksDir = join(root, 'networks');
    await mkdir(networksDir);
    const names = ['podnet', 'sec1', 'sec2'];
    for (const [i, name] of names.entries()) {
      await writeNetworkDefinition(networksDir, 'default', name, bridge(name, i));
      const made = await api.createNad('default', name, JSON.stringify(bridge(name, i)));
      if (made.status !== 201) throw new Error(`NAD ${name}: ${made.status}`);
    }
    const common = { networksDir, defaultNetwork: 'podnet', cniBinDir: referencePlugins(), logLevel: 'error' as const };
    const standalone = await Plexusd.start(teardown, { ...common, root: join(root, 'standalone') });
    const onApi = await Plexusd.start(teardown, {
      ...common,
      root: join(root, 'api'),
      extraFlags: ['--kubeconfig', api.userKubeconfig('plexus'), '--node-name', NODE],
    });
    const plugin = (d: Plexusd, annotations: Record<string, string> = {}): Plugin => ({
      binary: shimBinary(),
      env: { CNI_PATH: referencePlugins() },
      config: {
        cniVersion: '1.0.0',
        name: 'plexus',
        type: 'plexus-cni',
        socketPath: d.socket,
        runtimeConfig: { [POD_ANNOTATIONS_CAPABILITY]: annotations },
      },
    });

    let n = 0;
    /** A pod object on this node in the API (so the API daemon may attach it), and a netns for its sandbox. */
    async function makePod(annotations: Record<string, string>, nodeName = NODE): Promise<Pod> {
      const name = `${prefix}-${n++}`;
      const [path] = createNetns(teardown, [name]);
      const pod = newPod('default', name, path!);
      const made = await api.request('POST', '/api/v1/namespaces/default/pods', {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, annotations },
        spec: { nodeName, containers: [{ name: 'c', image: 'local.test/pause:1' }] },
      });
      if (made.status !== 201) throw new Error(`pod ${name}: ${made.status} ${JSON.stringify(made.body)}`);
      return { ...pod, uid: (made.body as { metadata: { uid: string } }).metadata.uid };
    }
    async function addDel(d: Plexusd, pod: Pod, annotations: Record<string, string> = {}): Promise<number> {
      const add = await invoke(plugin(d, annotations), 'ADD', pod);
      if (add.exitCode !== 0) throw new Error(`ADD ${pod.name}: ${add.stdout} ${add.stderr}`);
      const del = await invoke(plugin(d, annotations), 'DEL', pod);
      if (del.exitCode !== 0) throw new Error(`DEL ${pod.name}: ${del.stdout}`);
      // DEL answers before the links are gone, and the other daemon's ADD of this sandbox comes next (untimed wait).
      if ((await teardownsSettled(d.stateDir)) > 0) throw new Error(`DEL ${pod.name}: its teardown did not finish`);
      return add.ms;
    }
    await api.createPod('default', `${prefix}-warm`, { nodeName: NODE }); // also makes sa/default, which pods need

    // Latency: the same pods through both daemons, interleaved (which goes first alternates).
    const pods: Pod[] = [];
    for (let i = 0; i < iterations; i++) pods.push(await makePod({}));
    await sleep(1000); // every pod is in the API daemon's cache
    const samples = { standalone: [] as number[], api: [] as number[], paired: [] as number[] };
    for (const [i, pod] of pods.entries()) {
      const order: ('standalone' | 'api')[] = i % 2 ? ['standalone', 'api'] : ['api', 'standalone'];
      const ms: Record<string, number> = {};
      for (const which of order) ms[which] = await addDel(which === 'api' ? onApi : standalone, pod);
      if (i < 5) continue; // warm-up
      samples.standalone.push(ms.standalone!);
      samples.api.push(ms.api!);
      samples.paired.push(ms.api! - ms.standalone!);
    }

    // Requests per ADD, from the audit log: plexusd's requests other than its watches and lists.
    const count = async (
      label: string,
      pods: number,
      run: () => Promise<void>,
    ): Promise<Record<string, number | string>> => {
      await sleep(3000);
      const before = api.auditEvents('plexus').length;
      await run();
      await sleep(3000); // status and event writes run after the ADD; the audit log is written behind the request
      const events = api
        .auditEvents('plexus')
        .slice(before)
        .filter((e) => e.verb !== 'watch' && e.verb !== 'list');
      const byKind: Record<string, number> = {};
      for (const e of events) byKind[`${e.verb} ${e.resource}`] = (byKind[`${e.verb} ${e.resource}`] ?? 0) + 1;
      return {
        case: label,
        pods,
        ...Object.fromEntries(Object.entries(byKind).map(([k, v]) => [k, Math.round((v / pods) * 100) / 100])),
      };
    };
    const perAdd: Record<string, number | string>[] = [];
    const batch = 20;
    for (const [label, annotations] of [
      ['1 interface', {}],
      ['3 interfaces', { 'k8s.v1.cni.cncf.io/networks': 'sec1,sec2' }],
    ] as const) {
      const warm: Pod[] = [];
      for (let i = 0; i < batch; i++) warm.push(await makePod(annotations));
      await sleep(1000);
      perAdd.push(
        await count(`${label}, warm cache`, batch, async () => {
          for (const pod of warm) await addDel(onApi, pod, annotations);
        }),
      );
      // A miss: the pod is not in the cache (the watch delivers a new pod within a millisecond, before the kubelet
      // has made its sandbox, so a miss is forced: the pod object names another node, which the informer filters out).
      perAdd.push(
        await count(`${label}, cache miss`, batch, async () => {
          for (let i = 0; i < batch; i++) {
            const pod = await makePod(annotations, 'elsewhere');
            await addDel(onApi, pod, annotations);
          }
        }),
      );
    }
    const report = {
      kubernetes: k8sVersion()?.text,
      iterations: samples.api.length,
      latencyMs: {
        standalone: summarize(samples.standalone),
        api: summarize(samples.api),
        apiMinusStandalone: summarize(samples.paired),
      },
      requestsPerAdd: perAdd,
      plexusdPeakRssMiB: {
        api: Math.round((onApi.peakRssKiB() ?? 0) / 1024),
        standalone: Math.round((standalone.peakRssKiB() ?? 0) / 1024),
      },
    };
    console.log(JSON.stringify(report, null, 2));
    console.log(
      `API path adds ${report.latencyMs.apiMinusStandalone.median} ms (median, paired) to a 1-interface ADD: ${report.latencyMs.api.median} ms vs ${report.latencyMs.standalone.median} ms standalone`,
    );
    if (values.json) await writeFile(values.json, JSON.stringify(report, null, 2));
  } finally {
    const problems = await teardown.run();
    for (const p of problems) console.error(`teardown: ${p}`);
  }
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.stack : e);
  process.exit(1);
});
