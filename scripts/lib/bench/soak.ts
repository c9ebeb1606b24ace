/**
 * A soak (section 6): plexusd through thousands of ADD/DEL cycles of 2-network pods, as a busy node churns pods,
 * with its resident memory and open file descriptors read every segment: neither may grow with the cycles.
 */
import { newPod } from '../cni';
import { createNetns, deleteNetns, linksOfBridge, netnsPath } from '../host';
import type { MultiRuntime } from '../multinet';
import type { Plexusd } from '../plexusd';
import type { Teardown } from '../teardown';

export interface SoakSegment {
  /** Cycles done at the end of this segment. */
  readonly cycles: number;
  readonly rssKiB?: number;
  readonly fds?: number;
  readonly failures: number;
  readonly cyclesPerSecond: number;
}

export interface SoakFigures {
  readonly cycles: number;
  readonly concurrency: number;
  readonly networks: string;
  readonly segments: readonly SoakSegment[];
  readonly leaks: readonly string[];
  readonly errors: readonly string[];
}

export async function measureSoak(
  teardown: Teardown,
  prefix: string,
  runtime: MultiRuntime,
  networks: string,
  daemon: Plexusd,
  cycles: number,
  concurrency = 8,
  segment = 1000,
): Promise<SoakFigures> {
  // Each worker churns pods through one namespace of its own: ADD, then DEL, then the next pod.
  const names = Array.from({ length: concurrency }, (_, w) => `${prefix}-soak${w}`);
  createNetns(teardown, names);
  const segments: SoakSegment[] = [{ cycles: 0, ...daemon.usage(), failures: 0, cyclesPerSecond: 0 }];
  const errors = new Set<string>();
  let next = 0;
  let done = 0;
  let failures = 0;
  let segmentStart = Date.now();
  const worker = async (w: number): Promise<void> => {
    for (let i = next++; i < cycles; i = next++) {
      const pod = newPod('default', `soak-${w}-${i}`, netnsPath(names[w]!));
      const added = await runtime.add(pod);
      if (added.error !== undefined) errors.add(`ADD: ${added.error}`);
      const removed = await runtime.del(pod, added);
      if (removed.error !== undefined) errors.add(`DEL: ${removed.error}`);
      if (added.error !== undefined || removed.error !== undefined) failures++;
      if (++done % segment === 0 || done === cycles) {
        const seconds = (Date.now() - segmentStart) / 1000;
        segmentStart = Date.now();
        const cyclesInSegment = done - segments[segments.length - 1]!.cycles;
        segments.push({ cycles: done, ...daemon.usage(), failures, cyclesPerSecond: cyclesInSegment / seconds });
        failures = 0;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  await runtime.settled?.();
  const leaks = [
    ...(await runtime.leftovers()),
    ...runtime.bridges.flatMap((b) => linksOfBridge(b).map((l) => `port ${l} on ${b}`)),
  ];
  deleteNetns(names);
  return { cycles, concurrency, networks, segments, leaks, errors: [...errors].slice(0, 5) };
}
