/** One-interface pods through any subject: ADD/DEL latency (section 1, 1c) and bursts (section 3). */
import {
  type AddResult,
  type Outcome,
  type Pod,
  addressesOf,
  describeFailure,
  hostSideLinksOf,
  invoke,
  newPod,
  parseAdd,
} from '../cni';
import { createNetns, deleteNetns, hostLinks, ipBatch, linksOfBridge, netnsPath } from '../host';
import { type Summary, mapLimit, round, summarize } from '../stats';
import { type Subject } from '../subject';
import { type Teardown } from '../teardown';

export const WARMUP = 3;

// ---------------------------------------------------------------------------------------------
// What one pod's life through a subject looks like

export interface PodRun {
  readonly pod: Pod;
  readonly add: Outcome;
  readonly result?: AddResult;
  readonly addError?: string;
  readonly del?: Outcome;
  readonly delError?: string;
}

/** Host links each subject's pods created, so teardown can remove any a failed DEL left. */
export const hostLinksCreated = new Map<string, Set<string>>();

export async function addPod(subject: Subject, pod: Pod): Promise<Pick<PodRun, 'pod' | 'add' | 'result' | 'addError'>> {
  const add = await invoke(subject.plugin, 'ADD', pod);
  const parsed = parseAdd(add);
  if (!parsed.ok) return { pod, add, addError: parsed.why };
  const links = hostLinksCreated.get(subject.name) ?? new Set<string>();
  for (const l of hostSideLinksOf(parsed.result, subject.bridge)) links.add(l);
  hostLinksCreated.set(subject.name, links);
  return { pod, add, result: parsed.result };
}

/** The first DEL, as containerd's StopPodSandbox sends it: the pod's netns, prevResult from the cache. */
export async function delPod(
  subject: Subject,
  added: Pick<PodRun, 'pod' | 'result'>,
): Promise<{ del: Outcome; delError?: string }> {
  const del = await invoke(
    subject.plugin,
    'DEL',
    added.pod,
    added.result !== undefined ? { prevResult: added.result } : {},
  );
  return del.exitCode === 0 ? { del } : { del, delError: describeFailure(del) };
}

/** What a subject left on the host and in its IPAM after all its pods were deleted (netns still present). */
export async function leaksOf(
  subject: Subject,
  runs: readonly PodRun[],
  before: ReadonlySet<string>,
): Promise<string[]> {
  await subject.settled?.();
  const present = hostLinks();
  const links = new Set<string>();
  for (const r of runs)
    for (const l of r.result !== undefined ? hostSideLinksOf(r.result, subject.bridge) : [])
      if (present.has(l)) links.add(l);
  if (subject.bridge !== undefined) for (const l of linksOfBridge(subject.bridge)) links.add(l);
  const state = (await subject.leftovers()).filter((l) => !before.has(l));
  return [...[...links].map((l) => `link ${l}`), ...state];
}

// ---------------------------------------------------------------------------------------------
// 1. ADD/DEL latency, one pod at a time, subjects interleaved

export interface LatencyFigures {
  readonly add: Summary;
  readonly del: Summary;
  readonly failures: readonly string[];
  readonly leaks: readonly string[];
}

/**
 * Interleaved: each subject adds a pod and deletes it at once, in namespaces made beforehand. Churn (as a kubelet
 * replacing pods through containerd): each subject's ADD comes right after its DEL of the pod it added one iteration
 * earlier, and each pod's namespace is made just before its ADD and deleted just after its DEL (untimed), so the ADD
 * meets whatever that DEL and the namespace's teardown (the kernel's cleanup_net) left the kernel doing. Subjects
 * still alternate, so both see the same background.
 */
export async function measureLatency(
  teardown: Teardown,
  prefix: string,
  subjects: readonly Subject[],
  iterations: number,
  churn = false,
): Promise<Map<string, LatencyFigures>> {
  const total = WARMUP + iterations;
  const mode = churn ? 'c' : 'l';
  const netnsNames = subjects.flatMap((s) => Array.from({ length: total }, (_, i) => `${prefix}-${s.tag}-${mode}${i}`));
  if (churn) teardown.add(`delete ${netnsNames.length} netns`, () => deleteNetns(netnsNames));
  else createNetns(teardown, netnsNames);
  const churnLeaks = new Map<string, string[]>();
  const before = new Map<string, Set<string>>();
  for (const s of subjects) before.set(s.name, new Set(await s.leftovers()));
  const samples = new Map(
    subjects.map((s) => [
      s.name,
      { add: [] as number[], del: [] as number[], failures: [] as string[], runs: [] as PodRun[] },
    ]),
  );
  const alive = new Map<string, { added: Awaited<ReturnType<typeof addPod>>; measured: boolean }>();
  const remove = async (
    subject: Subject,
    acc: NonNullable<ReturnType<typeof samples.get>>,
    added: Awaited<ReturnType<typeof addPod>>,
    measured: boolean,
  ): Promise<void> => {
    const { del, delError } = await delPod(subject, added);
    acc.runs.push({ ...added, del, ...(delError !== undefined ? { delError } : {}) });
    if (delError !== undefined) acc.failures.push(`DEL ${added.pod.name}: ${delError}`);
    if (measured && added.addError === undefined && delError === undefined) acc.del.push(del.ms);
    if (!churn) return;
    // The namespace goes now, and a host veth left behind would go with it: look for one first. A subject that tears
    // down after it answered (plexusd) still has it now; its records tell after it settled (leaksOf), as a veth
    // plexusd could not delete keeps its record open.
    const present = subject.settled === undefined ? hostLinks() : new Set<string>();
    const left =
      added.result !== undefined ? hostSideLinksOf(added.result, subject.bridge).filter((l) => present.has(l)) : [];
    if (left.length)
      churnLeaks.set(subject.name, [...(churnLeaks.get(subject.name) ?? []), ...left.map((l) => `link ${l}`)]);
    const r = ipBatch([`netns del ${added.pod.netns.split('/').pop()}`]);
    if (r.status !== 0) throw new Error(`ip netns del: ${r.stderr.trim()}`);
  };
  for (let i = 0; i < total; i++) {
    // Rotate who goes first so neither subject always runs on a cache the other just warmed.
    const order = subjects.map((_, k) => subjects[(i + k) % subjects.length] as Subject);
    for (const subject of order) {
      const acc = samples.get(subject.name);
      if (acc === undefined) continue;
      const previous = alive.get(subject.name);
      if (previous !== undefined) await remove(subject, acc, previous.added, previous.measured);
      const pod = newPod(
        'default',
        `bench-${subject.tag}-${mode}${i}`,
        netnsPath(`${prefix}-${subject.tag}-${mode}${i}`),
      );
      if (churn) {
        const r = ipBatch([`netns add ${prefix}-${subject.tag}-${mode}${i}`]);
        if (r.status !== 0) throw new Error(`ip netns add: ${r.stderr.trim()}`);
      }
      const added = await addPod(subject, pod);
      if (added.addError !== undefined) acc.failures.push(`ADD ${pod.name}: ${added.addError}`);
      if (i >= WARMUP && added.addError === undefined) acc.add.push(added.add.ms);
      if (churn) alive.set(subject.name, { added, measured: i >= WARMUP });
      else await remove(subject, acc, added, i >= WARMUP);
    }
    if (process.stdout.isTTY) process.stdout.write(`\r  ${i + 1}/${total} iterations (${WARMUP} warm-up)`);
  }
  for (const subject of subjects) {
    const last = alive.get(subject.name);
    const acc = samples.get(subject.name);
    if (last !== undefined && acc !== undefined) await remove(subject, acc, last.added, last.measured);
  }
  if (process.stdout.isTTY) process.stdout.write('\n');
  const figures = new Map<string, LatencyFigures>();
  for (const subject of subjects) {
    const acc = samples.get(subject.name);
    if (acc === undefined) continue;
    const leaks = [
      ...(churnLeaks.get(subject.name) ?? []),
      ...(await leaksOf(subject, acc.runs, before.get(subject.name) ?? new Set())),
    ];
    figures.set(subject.name, { add: summarize(acc.add), del: summarize(acc.del), failures: acc.failures, leaks });
  }
  deleteNetns(netnsNames);
  return figures;
}

// ---------------------------------------------------------------------------------------------
// 3. Bursts: N pods at concurrency c, then all deleted

export interface BurstFigures {
  readonly subject: string;
  readonly concurrency: number;
  readonly pods: number;
  readonly addWallMs: number;
  readonly addPodsPerSecond: number;
  readonly delWallMs: number;
  readonly add: Summary;
  readonly addFailures: number;
  readonly delFailures: number;
  readonly duplicateIps: readonly string[];
  readonly leaks: readonly string[];
  readonly errors: readonly string[];
}

export async function measureBurst(
  teardown: Teardown,
  prefix: string,
  subject: Subject,
  pods: number,
  concurrency: number,
): Promise<BurstFigures> {
  const names = Array.from({ length: pods }, (_, i) => `${prefix}-${subject.tag}-c${concurrency}-${i}`);
  createNetns(teardown, names);
  try {
    const before = new Set(await subject.leftovers());
    const podList = names.map((n, i) =>
      newPod('default', `bench-${subject.tag}-c${concurrency}-${i}`, `/var/run/netns/${n}`),
    );
    let t0 = process.hrtime.bigint();
    const added = await mapLimit(podList, concurrency, (pod) => addPod(subject, pod));
    const addWallMs = Number(process.hrtime.bigint() - t0) / 1e6;
    t0 = process.hrtime.bigint();
    const deleted = await mapLimit(added, concurrency, (a) => delPod(subject, a));
    const delWallMs = Number(process.hrtime.bigint() - t0) / 1e6;
    const runs: PodRun[] = added.map((a, i) => ({ ...a, ...deleted[i] }));
    const owners = new Map<string, number>();
    for (const r of runs)
      for (const a of r.result !== undefined ? addressesOf(r.result) : []) owners.set(a, (owners.get(a) ?? 0) + 1);
    const ok = runs.filter((r) => r.addError === undefined);
    return {
      subject: subject.name,
      concurrency,
      pods,
      addWallMs: round(addWallMs),
      addPodsPerSecond: round((ok.length * 1000) / addWallMs, 1),
      delWallMs: round(delWallMs),
      add: summarize(ok.map((r) => r.add.ms)),
      addFailures: runs.length - ok.length,
      delFailures: runs.filter((r) => r.delError !== undefined).length,
      duplicateIps: [...owners].filter(([, n]) => n > 1).map(([a, n]) => `${a} x${n}`),
      leaks: await leaksOf(subject, runs, before),
      errors: [
        ...new Set(
          runs.flatMap((r) => [
            ...(r.addError !== undefined ? [`ADD: ${r.addError}`] : []),
            ...(r.delError !== undefined ? [`DEL: ${r.delError}`] : []),
          ]),
        ),
      ].slice(0, 5),
    };
  } finally {
    deleteNetns(names);
  }
}
