/**
 * Cluster IPAM against host-local, in one run, on a real kube-apiserver + etcd (binaries as for the tests): N plexusd
 * instances as simulated nodes (own --node-name, state dir, socket) attach pods with two macvlan networks on one shared
 * segment (a veth this script owns) through the real shim, concurrently. Mode `cluster`: both networks use cluster
 * IPAM (type plexus, and a dual-stack whereabouts config); mode `host-local`: the same networks with host-local. For
 * each: total time, pods/s, ADD p50/p99, and (cluster) IPAM API writes per allocation from the audit log; duplicates
 * across nodes are counted for cluster IPAM (host-local cannot avoid them: that is the point).
 *
 *   node dist/scripts/cluster-ipam-bench.js [--nodes 10] [--pods 100] [--concurrency 4] [--json FILE]
 */
import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { DaemonFixture, type ShimOutput } from '../test/support/daemon';
import { k8sMissing, k8sVersion, KubeApiFixture } from '../test/support/k8s';
import { NetnsFixture } from '../test/support/netns';
import { referencePlugins } from '../test/support/plugin-dir';
import { ip, uniquePrefix } from './lib/host';
import { mapLimit, summarize } from './lib/stats';

type Mode = 'cluster' | 'host-local';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string' },
      pods: { type: 'string' },
      concurrency: { type: 'string' },
      json: { type: 'string' },
    },
  });
  const nodeCount = Number(values.nodes ?? 10);
  const podsPerNode = Number(values.pods ?? 100);
  const concurrency = Number(values.concurrency ?? 4);
  const missing = k8sMissing();
  if (missing) throw new Error(`cannot run: ${missing}`);
  const prefix = uniquePrefix('cb');
  const master = `${prefix}m0`;
  const o = 100 + Math.floor(Math.random() * 100);
  const fx = new NetnsFixture(prefix);
  fx.trackHostLink(master);
  let api: KubeApiFixture | undefined;
  const daemons: DaemonFixture[] = [];
  try {
    ip('link', 'add', master, 'type', 'veth', 'peer', 'name', `${prefix}m1`);
    ip('link', 'set', master, 'up');
    api = await KubeApiFixture.startForPlexus({ audit: true });
    const macvlan = (name: string, ipam: Record<string, unknown>): string =>
      JSON.stringify({ cniVersion: '1.0.0', name, type: 'macvlan', master, mode: 'bridge', ipam });
    const nads: Record<string, string> = {
      ca: macvlan('ca', { type: 'plexus', ranges: [[{ subnet: `10.${o}.0.0/20` }]] }),
      cb: macvlan('cb', {
        type: 'whereabouts',
        network_name: `${prefix}-cb`,
        ipRanges: [{ range: `10.${o}.16.0/20` }, { range: `fd00:${o}::/112` }],
      }),
      ha: macvlan('ha', { type: 'host-local', ranges: [[{ subnet: `10.${o}.32.0/20` }]] }),
      hb: macvlan('hb', {
        type: 'host-local',
        ranges: [[{ subnet: `10.${o}.48.0/20` }], [{ subnet: `fd01:${o}::/112` }]],
      }),
    };
    for (const [name, config] of Object.entries(nads))
      if ((await api.createNad('default', name, config)).status !== 201) throw new Error(`NAD ${name}`);
    const kubeconfig = api.userKubeconfig('plexus');
    for (let i = 0; i < nodeCount; i++) {
      await api.createNode(`${prefix}-n${i}`);
    }
    let podCount = 0;
    const reports = [];
    for (const mode of ['host-local', 'cluster'] as Mode[]) {
      const [first, second] = mode === 'cluster' ? ['ca', 'cb'] : ['ha', 'hb'];
      const nodes = Array.from(
        { length: nodeCount },
        (_, i) => new DaemonFixture(first, { kubeconfig, nodeName: `${prefix}-n${i}`, cniBinDir: referencePlugins() }),
      );
      daemons.push(...nodes);
      await Promise.all(nodes.map((n) => n.start(60000)));
      const call = (
        node: DaemonFixture,
        command: 'ADD' | 'DEL',
        pod: { cid: string; netns: string },
      ): Promise<ShimOutput> =>
        node.cni({
          command,
          containerId: pod.cid,
          netns: pod.netns,
          ifname: 'eth0',
          args: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_INFRA_CONTAINER_ID=${pod.cid}`,
          config: node.runtimeConfig(
            { runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': second } } },
            '1.0.0',
          ),
        });
      const pods = nodes.map(() =>
        Array.from({ length: podsPerNode }, () => ({
          cid: `${prefix}c${++podCount}`,
          netns: fx.create(`p${podCount}`).path,
        })),
      );
      const writes = (): number =>
        api!
          .auditEvents('plexus')
          .filter((e) => ['create', 'update', 'patch', 'delete'].includes(e.verb) && e.resource.startsWith('ip'))
          .length;
      const writesBefore = writes();
      const latencies: number[] = [];
      const started = performance.now();
      const added = (
        await Promise.all(
          nodes.map((node, i) =>
            mapLimit(pods[i]!, concurrency, async (pod) => {
              const t0 = performance.now();
              const out = await call(node, 'ADD', pod);
              latencies.push(performance.now() - t0);
              return { node, pod, out };
            }),
          ),
        )
      ).flat();
      const seconds = (performance.now() - started) / 1000;
      await new Promise((r) => setTimeout(r, 2000)); // the audit log is written behind the requests
      const apiWrites = writes() - writesBefore;
      const failures = added.filter((a) => a.out.code !== 0);
      const addresses = added.flatMap((a) =>
        ((a.out.json?.ips as { address: string }[] | undefined) ?? []).map((x) => x.address.split('/')[0]!),
      );
      const duplicates = addresses.length - new Set(addresses).size;
      const allocations = added.length * 2;
      const s = summarize(latencies);
      const report = {
        mode,
        nodes: nodeCount,
        pods: added.length,
        addresses: addresses.length,
        failures: failures.length,
        duplicatesAcrossNodes: duplicates,
        seconds: Math.round(seconds * 100) / 100,
        podsPerSecond: Math.round(added.length / seconds),
        addMs: {
          p50: s.median,
          p90: s.p90,
          p99: Math.round(latencies.sort((a, b) => a - b)[Math.floor(latencies.length * 0.99)]! * 100) / 100,
          max: s.max,
        },
        ipamApiWrites: apiWrites,
        apiWritesPerAllocation: Math.round((apiWrites / allocations) * 1000) / 1000,
      };
      reports.push(report);
      console.log(
        `${mode}: ${report.pods} pods x 2 networks on ${nodeCount} nodes in ${report.seconds} s (${report.podsPerSecond} pods/s), ADD p50 ${report.addMs.p50} ms p99 ${report.addMs.p99} ms, ` +
          `${report.failures} failures, ${duplicates} duplicate addresses across nodes, ${apiWrites} IPAM API writes (${report.apiWritesPerAllocation} per allocation)`,
      );
      await Promise.all(nodes.map((node, i) => mapLimit(pods[i]!, concurrency, (pod) => call(node, 'DEL', pod))));
      for (const n of nodes) await n.stop();
    }
    const [hl, cl] = reports;
    const summary = {
      kubernetes: k8sVersion()?.text,
      reports,
      p99Ratio: Math.round((cl!.addMs.p99 / hl!.addMs.p99) * 100) / 100,
      throughputRatio: Math.round((cl!.podsPerSecond / hl!.podsPerSecond) * 100) / 100,
    };
    console.log(JSON.stringify(summary, null, 2));
    console.log(`cluster IPAM vs host-local: p99 ADD ${summary.p99Ratio}x, throughput ${summary.throughputRatio}x`);
    if (values.json) await writeFile(values.json, JSON.stringify(summary, null, 2));
  } finally {
    for (const d of daemons) await d.stop().catch(() => undefined);
    await api?.stop();
    fx.cleanup();
  }
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.stack : e);
  process.exit(1);
});
