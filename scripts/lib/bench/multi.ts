/** Pods with 1, 2 and 4 interfaces (section 4) and a burst of 3-network pods (section 5): Plexus against the reference runtime. */
import { type Pod, newPod } from '../cni';
import { createNetns, deleteNetns, hostLinks, linksOfBridge, netnsPath, podLinks } from '../host';
import { type MultiAdd, type MultiRuntime, addressesOfAdd, hostLinksOfAdd } from '../multinet';
import { type Plexusd } from '../plexusd';
import { mapLimit, round, summarize } from '../stats';
import { type Teardown } from '../teardown';
import { type BurstFigures, type LatencyFigures, WARMUP, hostLinksCreated } from './single';

// ---------------------------------------------------------------------------------------------
// 4. ADD/DEL latency of pods with 1, 2 and 4 interfaces: Plexus vs the reference runtime, interleaved

export interface MultiVariant {
  /** `1`, `2`, `4`, `4d`: interfaces per pod (`d`: one of them delegated). */
  readonly key: string;
  readonly networks: string;
  readonly runtimes: readonly MultiRuntime[];
}

export interface MultiLatency {
  /** variant key -> runtime name -> figures; leaks here are links in the results and links left in the pods. */
  readonly figures: Record<string, Record<string, LatencyFigures>>;
  /** runtime name -> ports left on its bridges and new leases/records, after every variant's pods were deleted. */
  readonly sharedLeaks: Record<string, string[]>;
}

/** Links a runtime's pods left: host links their results named, and anything but lo in their (still existing) netns. */
export function multiLinkLeaks(
  runtime: MultiRuntime,
  adds: readonly MultiAdd[],
  netnsNames: readonly string[],
): string[] {
  const present = hostLinks();
  const links = new Set<string>();
  for (const a of adds) for (const l of hostLinksOfAdd(a, runtime.bridges)) if (present.has(l)) links.add(`link ${l}`);
  for (const n of netnsNames) for (const l of podLinks(n)) links.add(`pod link ${n}:${l}`);
  return [...links];
}

export function bridgePorts(bridges: readonly string[]): string[] {
  return bridges.flatMap((b) => linksOfBridge(b).map((l) => `port ${b}:${l}`));
}

export function trackHostLinks(runtime: MultiRuntime, added: MultiAdd): void {
  const links = hostLinksCreated.get(runtime.name) ?? new Set<string>();
  for (const l of hostLinksOfAdd(added, runtime.bridges)) links.add(l);
  hostLinksCreated.set(runtime.name, links);
}

export async function measureMultiLatency(
  teardown: Teardown,
  prefix: string,
  variants: readonly MultiVariant[],
  iterations: number,
): Promise<MultiLatency> {
  const total = WARMUP + iterations;
  const netnsOf = (v: MultiVariant, r: MultiRuntime, i: number): string => `${prefix}-${r.tag}${v.key}-${i}`;
  const names = variants.flatMap((v) =>
    v.runtimes.flatMap((r) => Array.from({ length: total }, (_, i) => netnsOf(v, r, i))),
  );
  createNetns(teardown, names);
  try {
    const families = new Map<string, MultiRuntime[]>();
    for (const v of variants) for (const r of v.runtimes) families.set(r.name, [...(families.get(r.name) ?? []), r]);
    const before = new Map<string, Set<string>>();
    for (const [name, rs] of families) before.set(name, new Set(await (rs[0] as MultiRuntime).leftovers()));
    type Acc = { add: number[]; del: number[]; failures: string[]; adds: MultiAdd[] };
    const acc = new Map<MultiRuntime, Acc>();
    for (const v of variants) for (const r of v.runtimes) acc.set(r, { add: [], del: [], failures: [], adds: [] });
    for (let i = 0; i < total; i++) {
      // Rotate the variants and, within each, who goes first, so no one always runs right after the same neighbour.
      for (let k = 0; k < variants.length; k++) {
        const v = variants[(i + k) % variants.length] as MultiVariant;
        for (let j = 0; j < v.runtimes.length; j++) {
          const r = v.runtimes[(i + j) % v.runtimes.length] as MultiRuntime;
          const a = acc.get(r) as Acc;
          const pod = newPod('default', `bench-${r.tag}${v.key}-${i}`, netnsPath(netnsOf(v, r, i)));
          const added = await r.add(pod);
          trackHostLinks(r, added);
          const del = await r.del(pod, added);
          a.adds.push(added);
          if (added.error !== undefined) a.failures.push(`ADD ${pod.name}: ${added.error}`);
          if (del.error !== undefined) a.failures.push(`DEL ${pod.name}: ${del.error}`);
          if (i < WARMUP) continue;
          if (added.error === undefined) a.add.push(added.ms);
          if (added.error === undefined && del.error === undefined) a.del.push(del.ms);
        }
      }
      if (process.stdout.isTTY) process.stdout.write(`\r  ${i + 1}/${total} iterations (${WARMUP} warm-up)`);
    }
    if (process.stdout.isTTY) process.stdout.write('\n');
    for (const rs of families.values()) await rs[0]?.settled?.();
    const figures: Record<string, Record<string, LatencyFigures>> = {};
    for (const v of variants) {
      const row: Record<string, LatencyFigures> = {};
      for (const r of v.runtimes) {
        const a = acc.get(r) as Acc;
        const netns = Array.from({ length: total }, (_, i) => netnsOf(v, r, i));
        row[r.name] = {
          add: summarize(a.add),
          del: summarize(a.del),
          failures: a.failures,
          leaks: multiLinkLeaks(r, a.adds, netns),
        };
      }
      figures[v.key] = row;
    }
    const sharedLeaks: Record<string, string[]> = {};
    for (const [name, rs] of families) {
      const was = before.get(name) ?? new Set<string>();
      const bridges = [...new Set(rs.flatMap((r) => r.bridges))];
      sharedLeaks[name] = [
        ...bridgePorts(bridges),
        ...(await (rs[0] as MultiRuntime).leftovers()).filter((l) => !was.has(l)),
      ];
    }
    return { figures, sharedLeaks };
  } finally {
    deleteNetns(names);
  }
}

// ---------------------------------------------------------------------------------------------
// 5. A burst of pods with 3 networks each

export interface MultiBurstFigures extends BurstFigures {
  readonly interfaces: number;
  /** plexusd's peak RSS during this burst (VmHWM reset just before it), for the plexus runtime. */
  readonly daemonPeakRssKiB?: number;
}

export async function measureMultiBurst(
  teardown: Teardown,
  prefix: string,
  runtime: MultiRuntime,
  pods: number,
  concurrency: number,
  daemon: Plexusd | undefined,
): Promise<MultiBurstFigures> {
  const names = Array.from({ length: pods }, (_, i) => `${prefix}-${runtime.tag}m-${i}`);
  createNetns(teardown, names);
  try {
    const before = new Set(await runtime.leftovers());
    const podList = names.map((n, i) => newPod('default', `bench-${runtime.tag}m-${i}`, netnsPath(n)));
    const resetOk = daemon?.resetPeakRss() ?? false;
    let t0 = process.hrtime.bigint();
    const added = await mapLimit(podList, concurrency, async (pod) => {
      const a = await runtime.add(pod);
      trackHostLinks(runtime, a);
      return a;
    });
    const addWallMs = Number(process.hrtime.bigint() - t0) / 1e6;
    t0 = process.hrtime.bigint();
    const deleted = await mapLimit(added, concurrency, (a, i) => runtime.del(podList[i] as Pod, a));
    const delWallMs = Number(process.hrtime.bigint() - t0) / 1e6;
    const peak = resetOk ? daemon?.peakRssKiB() : undefined;
    const owners = new Map<string, number>();
    for (const a of added) for (const address of addressesOfAdd(a)) owners.set(address, (owners.get(address) ?? 0) + 1);
    const ok = added.filter((a) => a.error === undefined);
    await runtime.settled?.();
    const leaks = [
      ...multiLinkLeaks(runtime, added, names),
      ...bridgePorts(runtime.bridges),
      ...(await runtime.leftovers()).filter((l) => !before.has(l)),
    ];
    return {
      subject: runtime.name,
      interfaces: runtime.interfaces,
      concurrency,
      pods,
      addWallMs: round(addWallMs),
      addPodsPerSecond: round((ok.length * 1000) / addWallMs, 1),
      delWallMs: round(delWallMs),
      add: summarize(ok.map((a) => a.ms)),
      addFailures: added.length - ok.length,
      delFailures: deleted.filter((d) => d.error !== undefined).length,
      duplicateIps: [...owners].filter(([, n]) => n > 1).map(([a, n]) => `${a} x${n}`),
      leaks,
      errors: [
        ...new Set([
          ...added.flatMap((a) => (a.error !== undefined ? [`ADD: ${a.error}`] : [])),
          ...deleted.flatMap((d) => (d.error !== undefined ? [`DEL: ${d.error}`] : [])),
        ]),
      ].slice(0, 5),
      ...(peak !== undefined ? { daemonPeakRssKiB: peak } : {}),
    };
  } finally {
    deleteNetns(names);
  }
}
