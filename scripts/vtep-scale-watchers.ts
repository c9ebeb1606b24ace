/**
 * The watching side of scripts/vtep-scale-bench.ts, in a process of its own so its CPU is its own: W VtepLeases (the
 * product's src/k8s/vtep-leases.ts), each on its own API client as a node's plexusd has, each serving VNI 4242 (which
 * starts its watch on the Leases). Counts, per watcher, the watch lines and bytes it received and how often it woke
 * its listener (a flood-entry round); answers the parent's `sample` with those and this process's CPU and RSS.
 *
 *   forked by vtep-scale-bench.js with: <kubeconfig> <namespace> <node>...
 */
import pino from 'pino';
import { KubeApiClient } from '../src/k8s/api-client';
import { loadKubeConfig } from '../src/k8s/kubeconfig';
import { VtepLeases } from '../src/k8s/vtep-leases';

export const BENCH_VNI = 4242;
/** The underlay address simulated node `sim-<i>` publishes. */
export const simulatedAddress = (i: number): string => `10.200.${Math.floor(i / 250)}.${(i % 250) + 1}`;
export const simulatedNode = (i: number): string => `sim-${i}`;

export interface WatcherCounts {
  readonly node: string;
  readonly lines: number;
  readonly bytes: number;
  readonly wakes: number;
  readonly livePeers: number;
}

export interface WatchersSample {
  readonly watchers: WatcherCounts[];
  /** This process's user + system CPU, µs, since it started. */
  readonly cpuMicros: number;
  readonly rssBytes: number;
}

async function main(): Promise<void> {
  const [kubeconfig, namespace, ...nodes] = process.argv.slice(2);
  if (!kubeconfig || !namespace || !nodes.length) throw new Error('usage: <kubeconfig> <namespace> <node>...');
  const endpoint = loadKubeConfig(kubeconfig);
  if (!endpoint.ok || !endpoint.value) throw new Error(`${kubeconfig}: no endpoint`);
  const log = pino({ level: 'warn' }, pino.destination(2));
  const watchers = nodes.map((node) => {
    const client = new KubeApiClient(endpoint.value!, { qps: 50, burst: 100, timeoutMs: 10_000 });
    const counts = { node, lines: 0, bytes: 0, wakes: 0 };
    // Instrumentation only: every line of every watch this client reads, counted on its way to the informer.
    const stream = client.stream.bind(client);
    client.stream = (path, resource, idleMs, onLine, signal) =>
      stream(
        path,
        resource,
        idleMs,
        (line) => {
          counts.lines += 1;
          counts.bytes += Buffer.byteLength(line) + 1;
          onLine(line);
        },
        signal,
      );
    const leases = new VtepLeases(client, { node, namespace }, log);
    leases.onChange(() => (counts.wakes += 1));
    return { client, leases, counts };
  });
  // The watchers are the first simulated nodes: they publish what the writer wrote for them (no write).
  await Promise.all(watchers.map((w, i) => w.leases.publish(new Map([[BENCH_VNI, simulatedAddress(i)]]))));
  process.on('message', (m: unknown) => {
    if (m === 'stop') {
      void Promise.all(watchers.map((w) => w.leases.stop())).then(() => {
        for (const w of watchers) w.client.close();
        process.exit(0);
      });
      return;
    }
    const cpu = process.cpuUsage();
    const sample: WatchersSample = {
      watchers: watchers.map((w) => ({ ...w.counts, livePeers: w.leases.livePeers()?.length ?? 0 })),
      cpuMicros: cpu.user + cpu.system,
      rssBytes: process.memoryUsage().rss,
    };
    process.send?.(sample);
  });
  process.send?.('ready');
}

if (require.main === module)
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
