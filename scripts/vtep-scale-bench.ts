/**
 * What cluster-mode vxlan costs the API at N nodes (docs/performance.md, "VTEPs at 500 nodes"), on a real
 * kube-apiserver + etcd (the test binaries): N simulated nodes' Leases, each renewed by the product's NodeLeases
 * (src/k8s/node-lease.ts: a GET and a PUT every third of the lease's duration, starts spread over one period as a
 * cluster's are) and annotated once with `plexus.io/vteps`, all from this one process; W real watchers (the product's
 * VtepLeases) in a child process (scripts/vtep-scale-watchers.ts). For each N, after one period of steady state, over
 * a window: watch events and bytes received per watcher per second, its listener's wakes, API writes/s (all
 * clients), the API server's and etcd's CPU (% of one core) and RSS, the watchers' CPU, and the load average.
 *
 *   node dist/scripts/vtep-scale-bench.js [--nodes 50,200,500] [--seconds 60] [--watchers 3] [--lease-seconds 40]
 *                                         [--json FILE]
 */
import { fork, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pino from 'pino';
import { KubeApiClient } from '../src/k8s/api-client';
import { loadKubeConfig } from '../src/k8s/kubeconfig';
import { leaseNameOf, NodeLeases } from '../src/k8s/node-lease';
import { VTEPS_ANNOTATION } from '../src/k8s/vtep-leases';
import { k8sMissing, k8sVersion, KubeApiFixture } from '../test/support/k8s';
import { BENCH_VNI, simulatedAddress, simulatedNode, type WatchersSample } from './vtep-scale-watchers';

const NAMESPACE = 'plexus-bench';
const CLK_TCK = 100;

interface Row {
  nodes: number;
  windowS: number;
  eventsPerWatcherS: number;
  bytesPerWatcherS: number;
  wakesPerWatcherS: number;
  livePeersSeen: number;
  apiWritesS: number;
  apiServerCpuPct: number;
  apiServerRssMiB: number;
  etcdCpuPct: number;
  watcherCpuPct: number;
  watchersRssMiB: number;
  load1: number;
}

/** utime + stime of a process, in seconds. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

function rssMiB(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'));
  return Math.round(Number(line?.split(/\s+/)[1] ?? 0) / 1024);
}

const writesOf = (client: KubeApiClient): number =>
  [...client.sent].filter(([k]) => /^(PUT|PATCH|POST|DELETE) /.test(k)).reduce((n, [, v]) => n + v, 0);

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The watchers' process: started, and asked for samples. */
class Watchers {
  private constructor(private readonly child: ChildProcess) {}

  static async start(kubeconfig: string, count: number): Promise<Watchers> {
    const nodes = Array.from({ length: count }, (_, i) => simulatedNode(i));
    const child = fork(join(__dirname, 'vtep-scale-watchers.js'), [kubeconfig, NAMESPACE, ...nodes]);
    await new Promise<void>((resolve, reject) => {
      child.once('message', () => resolve());
      child.once('exit', (code) => reject(new Error(`the watchers exited (${code})`)));
    });
    return new Watchers(child);
  }

  get pid(): number {
    return this.child.pid ?? 0;
  }

  sample(): Promise<WatchersSample> {
    return new Promise((resolve) => {
      this.child.once('message', (m) => resolve(m as WatchersSample));
      this.child.send('sample');
    });
  }

  async stop(): Promise<void> {
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.send('stop');
    await Promise.race([exited, sleep(5000)]);
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string' },
      seconds: { type: 'string' },
      watchers: { type: 'string' },
      'lease-seconds': { type: 'string' },
      json: { type: 'string' },
    },
  });
  const steps = (values.nodes ?? '50,200,500').split(',').map(Number);
  const windowS = Number(values.seconds ?? 60);
  const watcherCount = Number(values.watchers ?? 3);
  const leaseMs = Number(values['lease-seconds'] ?? 40) * 1000;
  const periodMs = leaseMs / 3;
  const missing = k8sMissing();
  if (missing) throw new Error(`cannot run: ${missing}`);
  let api: KubeApiFixture | undefined;
  let watchers: Watchers | undefined;
  const simulated: NodeLeases[] = [];
  const rows: Row[] = [];
  let writer: KubeApiClient | undefined;
  try {
    api = await KubeApiFixture.start();
    await api.ensureNamespace(NAMESPACE);
    const endpoint = loadKubeConfig(api.kubeconfig);
    if (!endpoint.ok || !endpoint.value) throw new Error('no endpoint in the fixture kubeconfig');
    // One client for every simulated node, limited only by the API server: N plexusds would each have their own.
    writer = new KubeApiClient(endpoint.value, { qps: 10_000, burst: 10_000, timeoutMs: 20_000 });
    const log = pino({ level: 'warn' }, pino.destination(2));
    const apiPid = api.pidOf('kube-apiserver') ?? 0;
    const etcdPid = api.pidOf('etcd') ?? 0;
    for (const n of steps) {
      await grow(simulated, n, { writer, log, leaseMs, periodMs });
      watchers ??= await Watchers.start(api.kubeconfig, watcherCount);
      await sleep(periodMs); // one renewal of every lease since the last one joined: steady state
      const before = { w: await watchers.sample(), writes: writesOf(writer), api: cpuSeconds(apiPid) };
      const etcdBefore = cpuSeconds(etcdPid);
      const started = Date.now();
      await sleep(windowS * 1000);
      const after = { w: await watchers.sample(), writes: writesOf(writer), api: cpuSeconds(apiPid) };
      const s = (Date.now() - started) / 1000;
      const per = (f: (c: WatchersSample['watchers'][number]) => number): number =>
        round(after.w.watchers.reduce((t, c, i) => t + f(c) - f(before.w.watchers[i] ?? c), 0) / watcherCount / s);
      rows.push({
        nodes: n,
        windowS: round(s),
        eventsPerWatcherS: per((c) => c.lines),
        bytesPerWatcherS: per((c) => c.bytes),
        wakesPerWatcherS: per((c) => c.wakes),
        livePeersSeen: Math.min(...after.w.watchers.map((c) => c.livePeers)),
        apiWritesS: round((after.writes - before.writes) / s),
        apiServerCpuPct: round(((after.api - before.api) / s) * 100),
        apiServerRssMiB: rssMiB(apiPid),
        etcdCpuPct: round(((cpuSeconds(etcdPid) - etcdBefore) / s) * 100),
        watcherCpuPct: round(((after.w.cpuMicros - before.w.cpuMicros) / 1e6 / s / watcherCount) * 100),
        watchersRssMiB: Math.round(after.w.rssBytes / 1048576),
        load1: round(loadavg()[0] ?? 0),
      });
      console.log(JSON.stringify(rows[rows.length - 1]));
    }
  } finally {
    await watchers?.stop();
    await Promise.all(simulated.map((l) => l.stop()));
    writer?.close();
    await api?.stop();
  }
  printTable(rows, { windowS, watcherCount, leaseMs });
  if (values.json) await writeFile(values.json, JSON.stringify({ windowS, watcherCount, leaseMs, rows }, null, 2));
}

/** Starts simulated nodes up to `n`, spread over one renewal period, each publishing its VTEP once its lease exists. */
async function grow(
  simulated: NodeLeases[],
  n: number,
  ctx: { writer: KubeApiClient; log: pino.Logger; leaseMs: number; periodMs: number },
): Promise<void> {
  const from = simulated.length;
  const gap = ctx.periodMs / Math.max(1, n - from);
  const joins: Promise<void>[] = [];
  for (let i = from; i < n; i++) {
    const node = simulatedNode(i);
    const lease = new NodeLeases(
      ctx.writer,
      { node, namespace: NAMESPACE, identity: `bench-${node}`, durationMs: ctx.leaseMs },
      ctx.log,
    );
    simulated.push(lease);
    joins.push(
      (async () => {
        await lease.start();
        await publish(ctx.writer, node, simulatedAddress(i));
      })(),
    );
    await sleep(gap);
  }
  await Promise.all(joins);
}

/** What VtepLeases.publish writes for a node serving BENCH_VNI: one merge PATCH of the annotation. */
async function publish(client: KubeApiClient, node: string, address: string): Promise<void> {
  const path = `/apis/coordination.k8s.io/v1/namespaces/${NAMESPACE}/leases/${leaseNameOf(node)}`;
  const text = JSON.stringify({ [BENCH_VNI]: address });
  const r = await client.request('PATCH', path, 'leases', {
    contentType: 'application/merge-patch+json',
    body: { metadata: { annotations: { [VTEPS_ANNOTATION]: text } } },
  });
  if (!r.ok) throw new Error(`publishing ${node}'s VTEP: ${r.error.message}`);
}

const round = (x: number): number => Math.round(x * 100) / 100;

function printTable(rows: readonly Row[], o: { windowS: number; watcherCount: number; leaseMs: number }): void {
  console.log(
    `\nVTEPs on node Leases, kube-apiserver ${k8sVersion()?.text ?? '?'}: lease ${o.leaseMs / 1000} s (renewed every ${round(o.leaseMs / 3000)} s), ${o.watcherCount} watchers, ${o.windowS} s windows`,
  );
  console.log(
    '| nodes | events/s per watcher | bytes/s per watcher | wakes/s per watcher | API writes/s | apiserver CPU % | apiserver RSS MiB | etcd CPU % | watcher CPU % | load1 |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows)
    console.log(
      `| ${r.nodes} | ${r.eventsPerWatcherS} | ${r.bytesPerWatcherS} | ${r.wakesPerWatcherS} | ${r.apiWritesS} | ${r.apiServerCpuPct} | ${r.apiServerRssMiB} | ${r.etcdCpuPct} | ${r.watcherCpuPct} | ${r.load1} |`,
    );
}

if (require.main === module)
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
