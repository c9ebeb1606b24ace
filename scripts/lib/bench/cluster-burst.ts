/**
 * One burst on the three-node test cluster (test/support/cluster/): N pods bound to each node, all created at once,
 * each timed from its create request to the API showing it Running. Mode `plain`: the nodes' own network only (the
 * reference bridge + host-local, Plexus uninstalled). Mode `plexus`: Plexus installed on every node, each pod with
 * its default network and the secondary networks asked. Then every pod is deleted until the API has none.
 */
import { readFileSync } from 'node:fs';
import type { TestCluster } from '../../../test/support/cluster/cluster';
import type { ClusterNode } from '../../../test/support/cluster/node';
import { duplicates } from '../../../test/support/cluster/node-death';
import {
  addressesOn,
  type ApiPod,
  createPod,
  deleteAllPods,
  listPods,
  NETWORKS,
  networkStatus,
  sandboxFailures,
} from '../../../test/support/cluster/pods';
import { apiRequestCounts, writesBetween, writesByResource } from './api-requests';
import { type CallDurations, callDurations } from './cni-durations';
import { loadAverage } from '../host';
import { percentile, round } from '../stats';

export type ClusterBurstMode = 'plain' | 'plexus';

export interface PodClock {
  readonly createdAt: number;
  runningAt?: number;
}

export interface BurstFigures {
  readonly pods: number;
  /** Pods that reached Running. */
  readonly running: number;
  /** Per pod, create request to Running. */
  readonly p50Seconds: number;
  readonly p99Seconds: number;
  /** First create request to the last pod Running. */
  readonly allRunningSeconds: number;
}

/** The burst's figures from each pod's clock (performance.now() ms) and the first create's. */
export function burstFigures(clocks: readonly PodClock[], startedAt: number): BurstFigures {
  const ran = clocks.filter((c): c is Required<PodClock> => c.runningAt !== undefined);
  const waits = ran.map((c) => (c.runningAt - c.createdAt) / 1000).sort((a, b) => a - b);
  const last = Math.max(...ran.map((c) => c.runningAt));
  return {
    pods: clocks.length,
    running: ran.length,
    p50Seconds: round(percentile(waits, 50)),
    p99Seconds: round(percentile(waits, 99)),
    allRunningSeconds: ran.length ? round((last - startedAt) / 1000) : NaN,
  };
}

/** plexus / plain of each figure: the goal is at most 1.05. */
export const burstRatio = (
  plexus: BurstFigures,
  plain: BurstFigures,
): Record<'p50' | 'p99' | 'allRunning', number> => ({
  p50: round(plexus.p50Seconds / plain.p50Seconds),
  p99: round(plexus.p99Seconds / plain.p99Seconds),
  allRunning: round(plexus.allRunningSeconds / plain.allRunningSeconds),
});

export interface BurstPlan {
  readonly mode: ClusterBurstMode;
  readonly round: number;
  readonly namespace: string;
  readonly podsPerNode: number;
  /** The NADs each pod selects in mode plexus. */
  readonly networks: readonly string[];
  /** Of those, the ones whose addresses come from cluster IPAM. */
  readonly clusterNetworks: readonly string[];
  readonly timeoutMs: number;
  readonly log: (line: string) => void;
}

export interface BurstReport extends BurstFigures {
  readonly mode: ClusterBurstMode;
  readonly round: number;
  readonly nodes: number;
  /** FailedCreatePodSandBox events of this burst's pods: sandboxes the kubelet had to retry. */
  readonly sandboxFailures: number;
  /** Addresses cluster IPAM gave (network-status), and the same address given twice. */
  readonly clusterAddresses: number;
  readonly duplicateAddresses: number;
  /** Cluster IPAM addresses over the time to all Running. */
  readonly addressesPerSecond: number;
  /** Writes to ipam.plexus.io (blocks, pools) during the burst, and all API writes, by anyone, per pod. */
  readonly ipamWrites: number;
  readonly ipamWritesPerAddress: number;
  readonly allWritesPerPod: number;
  /** Every API write during the burst by resource, by anyone (kubelets, controllers, plexusd). */
  readonly writes: [string, number][];
  /** Plexus: each node's ADDs as its plexusd timed them (its histogram, since it started), when /metrics answered. */
  readonly adds: (CallDurations & { readonly node: string })[];
  readonly load: { readonly start: number; readonly end: number };
}

const POLL_MS = 200;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A node's plexusd's ADD durations, read from its /metrics on the node's loopback; undefined when unreadable. */
function nodeAdds(n: ClusterNode): (CallDurations & { node: string }) | undefined {
  const settings = JSON.parse(readFileSync(n.paths.etc('plexusd.json'), 'utf8')) as { metricsAddress?: string };
  const r = n.run(['busybox', 'wget', '-qO-', `http://${settings.metricsAddress ?? '127.0.0.1:9468'}/metrics`]);
  const adds = r.status === 0 ? callDurations(r.out, 'ADD') : undefined;
  return adds ? { node: n.name, ...adds } : undefined;
}

/** Polls the API until every pod is Running (noting when each first was) or the time is up. */
async function followRunning(
  c: TestCluster,
  namespace: string,
  clocks: Map<string, PodClock>,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const pods = await listPods(c.api, namespace);
    const now = performance.now();
    for (const p of pods) {
      const clock = clocks.get(p.metadata.name);
      if (clock && p.status?.phase === 'Running') clock.runningAt ??= now;
    }
    if ([...clocks.values()].every((k) => k.runningAt !== undefined)) return;
    await sleep(POLL_MS);
  }
}

/** The pods' network-status once each has an entry per network asked (plexusd writes it just after the ADD). */
async function statusesOf(c: TestCluster, plan: BurstPlan, names: ReadonlySet<string>): Promise<ApiPod[]> {
  const deadline = Date.now() + 60000;
  for (;;) {
    const pods = (await listPods(c.api, plan.namespace)).filter((p) => names.has(p.metadata.name));
    const whole = pods.every((p) => networkStatus(p).length === plan.networks.length + 1);
    if (whole || Date.now() > deadline) return pods;
    await sleep(500);
  }
}

export async function runClusterBurst(c: TestCluster, plan: BurstPlan): Promise<BurstReport> {
  const { mode, namespace } = plan;
  const load = { start: loadAverage(), end: NaN };
  const annotations: Record<string, string> = mode === 'plexus' ? { [NETWORKS]: plan.networks.join(',') } : {};
  const pods = c.nodes.flatMap((n, i) =>
    Array.from({ length: plan.podsPerNode }, (_, k) => ({
      node: n.name,
      name: `${mode}-r${plan.round}-n${i + 1}-${k}`,
    })),
  );
  const clocks = new Map<string, PodClock>();
  const before = await apiRequestCounts(c.api);
  const startedAt = performance.now();
  await Promise.all(
    pods.map(({ node, name }) => {
      clocks.set(name, { createdAt: performance.now() });
      return createPod(c.api, namespace, name, { nodeName: node, annotations });
    }),
  );
  await followRunning(c, namespace, clocks, plan.timeoutMs);
  const figures = burstFigures([...clocks.values()], startedAt);
  const names = new Set(clocks.keys());
  const statuses = mode === 'plexus' ? await statusesOf(c, plan, names) : [];
  const after = await apiRequestCounts(c.api);
  const adds = mode === 'plexus' ? c.nodes.flatMap((n) => nodeAdds(n) ?? []) : [];
  const addresses = statuses.flatMap((p) => plan.clusterNetworks.flatMap((n) => addressesOn(p, `${namespace}/${n}`)));
  const retried = (await sandboxFailures(c.api, namespace)).filter((f) => names.has(f.split(':')[0]!));
  const ipamWrites = writesBetween(before, after, { group: 'ipam.plexus.io' });
  load.end = loadAverage();
  plan.log(
    `${mode} round ${plan.round}: ${figures.running}/${figures.pods} Running, all in ${figures.allRunningSeconds} s ` +
      `(load ${load.start} -> ${load.end})`,
  );
  await deleteAllPods(c.api, namespace, 300000);
  return {
    mode,
    round: plan.round,
    nodes: c.nodes.length,
    ...figures,
    sandboxFailures: retried.length,
    clusterAddresses: addresses.length,
    duplicateAddresses: duplicates(addresses).length,
    addressesPerSecond: round(addresses.length / figures.allRunningSeconds, 1),
    ipamWrites,
    ipamWritesPerAddress: addresses.length ? round(ipamWrites / addresses.length, 3) : NaN,
    allWritesPerPod: round(writesBetween(before, after) / pods.length, 1),
    writes: writesByResource(before, after),
    adds,
    load,
  };
}
