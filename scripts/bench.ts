/**
 * `npm run bench`: Plexus against the reference bridge plugin, through the real executables, in one
 * interleaved run so the ratios are honest. See docs/performance.md for what is measured and why.
 *
 *   node dist/scripts/bench.js [--iterations N] [--burst N] [--concurrency 1,4,16] [--json FILE]
 *        [--markdown FILE] [--subject name=/path/to/plugin:/path/to/config.json]... [--no-plexus]
 *        [--no-reference] [--no-multi] [--multi-concurrency N] [--state-sync true|false]
 */
import { spawn } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { type AddResult, CallsAborted, type Outcome, type Plugin, type Pod, TIME_BINARY, abortCalls, addressesOf, describeFailure, hostSideLinksOf, invoke, newPod, parseAdd } from './lib/cni';
import {
  createNetns, createUplink, deleteLinkIfPresent, deleteNetns, freeTenNet, hostLinks, ipBatch, linkExists, linksOfBridge, listNetns, machine, netnsPath, podLinks,
  restoreForwardingOnTeardown, uniquePrefix,
} from './lib/host';
import { type MultiAdd, type MultiRuntime, addressesOfAdd, hostLinksOfAdd, plexusRuntime, referenceRuntime } from './lib/multinet';
import { Plexusd, hostLocalLeftovers, httpOverSocket, repoRoot, shimBinary, writeNetworkDefinition } from './lib/plexusd';
import { type Summary, fmt, mapLimit, markdownTable, round, summarize, table } from './lib/stats';
import { type Subject, describeSubject, parseSubjectSpec } from './lib/subject';
import { Teardown } from './lib/teardown';

const REFERENCE_DIR = '/usr/lib/cni';
const WARMUP = 3;

interface Options {
  readonly iterations: number;
  readonly burst: number;
  readonly concurrency: readonly number[];
  readonly shimCalls: number;
  readonly json?: string;
  readonly markdown?: string;
  readonly extra: readonly string[];
  readonly plexus: boolean;
  readonly reference: boolean;
  readonly stateSync?: boolean;
  readonly stateParent?: string;
  readonly multi: boolean;
  readonly multiConcurrency: number;
}

const USAGE = `usage: node dist/scripts/bench.js [options]
  --iterations N         ADD/DEL latency samples per subject (default 50)
  --state-parent DIR     where both subjects keep their state (default /var/lib, as on nodes)
  --burst N              pods per burst (default 110)
  --concurrency LIST     burst concurrency levels (default 1,4,16)
  --shim-calls N         VERSION calls for the shim overhead figures (default 50)
  --json FILE            also write every figure as JSON
  --markdown FILE        also write the result tables as Markdown
  --subject N=BIN:CONF   add a CNI plugin with its single-plugin config (repeatable)
  --no-plexus            leave Plexus out (e.g. before plexusd exists)
  --no-reference         leave the reference bridge plugin (and the reference runtime) out
  --no-multi             skip the multi-interface sections (4 and 5)
  --multi-concurrency N  concurrency of the multi-interface burst (default 16)
  --state-sync BOOL      pass --state-sync to plexusd (default: the daemon's default)`;

const FLAGS = {
  iterations: { type: 'string' }, 'state-parent': { type: 'string' }, burst: { type: 'string' }, 'shim-calls': { type: 'string' },
  concurrency: { type: 'string' }, json: { type: 'string' }, markdown: { type: 'string' }, subject: { type: 'string', multiple: true },
  'no-plexus': { type: 'boolean' }, 'no-reference': { type: 'boolean' }, 'no-multi': { type: 'boolean' }, 'multi-concurrency': { type: 'string' },
  'state-sync': { type: 'string' }, help: { type: 'boolean', short: 'h' },
} as const;

function parseOptions(argv: readonly string[]): Options {
  let values;
  try {
    ({ values } = parseArgs({ args: [...argv], options: FLAGS, strict: true, allowPositionals: false }));
  } catch (e) {
    throw new Error(`${(e as Error).message}\n${USAGE}`);
  }
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const positive = (flag: string, v: string): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag} needs a positive integer, got ${v}`);
    return n;
  };
  const count = (flag: 'iterations' | 'burst' | 'shim-calls' | 'multi-concurrency', dflt: number): number => (values[flag] === undefined ? dflt : positive(flag, values[flag]));
  const stateSync = values['state-sync'];
  if (stateSync !== undefined && stateSync !== 'true' && stateSync !== 'false') throw new Error('--state-sync needs true or false');
  return {
    iterations: count('iterations', 50),
    burst: count('burst', 110),
    shimCalls: count('shim-calls', 50),
    multiConcurrency: count('multi-concurrency', 16),
    concurrency: values.concurrency === undefined ? [1, 4, 16] : values.concurrency.split(',').map((c) => positive('concurrency', c)),
    extra: values.subject ?? [],
    plexus: !values['no-plexus'],
    reference: !values['no-reference'],
    multi: !values['no-multi'],
    ...(values.json !== undefined ? { json: values.json } : {}),
    ...(values.markdown !== undefined ? { markdown: values.markdown } : {}),
    ...(values['state-parent'] !== undefined ? { stateParent: values['state-parent'] } : {}),
    ...(stateSync !== undefined ? { stateSync: stateSync === 'true' } : {}),
  };
}

// ---------------------------------------------------------------------------------------------
// What one pod's life through a subject looks like

interface PodRun {
  readonly pod: Pod;
  readonly add: Outcome;
  readonly result?: AddResult;
  readonly addError?: string;
  readonly del?: Outcome;
  readonly delError?: string;
}

/** Host links each subject's pods created, so teardown can remove any a failed DEL left. */
const hostLinksCreated = new Map<string, Set<string>>();

async function addPod(subject: Subject, pod: Pod): Promise<Pick<PodRun, 'pod' | 'add' | 'result' | 'addError'>> {
  const add = await invoke(subject.plugin, 'ADD', pod);
  const parsed = parseAdd(add);
  if (!parsed.ok) return { pod, add, addError: parsed.why };
  const links = hostLinksCreated.get(subject.name) ?? new Set<string>();
  for (const l of hostSideLinksOf(parsed.result, subject.bridge)) links.add(l);
  hostLinksCreated.set(subject.name, links);
  return { pod, add, result: parsed.result };
}

/** The first DEL, as containerd's StopPodSandbox sends it: the pod's netns, prevResult from the cache. */
async function delPod(subject: Subject, added: Pick<PodRun, 'pod' | 'result'>): Promise<{ del: Outcome; delError?: string }> {
  const del = await invoke(subject.plugin, 'DEL', added.pod, added.result !== undefined ? { prevResult: added.result } : {});
  return del.exitCode === 0 ? { del } : { del, delError: describeFailure(del) };
}

/** What a subject left on the host and in its IPAM after all its pods were deleted (netns still present). */
async function leaksOf(subject: Subject, runs: readonly PodRun[], before: ReadonlySet<string>): Promise<string[]> {
  const present = hostLinks();
  const links = new Set<string>();
  for (const r of runs) for (const l of r.result !== undefined ? hostSideLinksOf(r.result, subject.bridge) : []) if (present.has(l)) links.add(l);
  if (subject.bridge !== undefined) for (const l of linksOfBridge(subject.bridge)) links.add(l);
  const state = (await subject.leftovers()).filter((l) => !before.has(l));
  return [...[...links].map((l) => `link ${l}`), ...state];
}

// ---------------------------------------------------------------------------------------------
// 1. ADD/DEL latency, one pod at a time, subjects interleaved

interface LatencyFigures {
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
async function measureLatency(teardown: Teardown, prefix: string, subjects: readonly Subject[], iterations: number, churn = false): Promise<Map<string, LatencyFigures>> {
  const total = WARMUP + iterations;
  const mode = churn ? 'c' : 'l';
  const netnsNames = subjects.flatMap((s) => Array.from({ length: total }, (_, i) => `${prefix}-${s.tag}-${mode}${i}`));
  if (churn) teardown.add(`delete ${netnsNames.length} netns`, () => deleteNetns(netnsNames));
  else createNetns(teardown, netnsNames);
  const churnLeaks = new Map<string, string[]>();
  const before = new Map<string, Set<string>>();
  for (const s of subjects) before.set(s.name, new Set(await s.leftovers()));
  const samples = new Map(subjects.map((s) => [s.name, { add: [] as number[], del: [] as number[], failures: [] as string[], runs: [] as PodRun[] }]));
  const alive = new Map<string, { added: Awaited<ReturnType<typeof addPod>>; measured: boolean }>();
  const remove = async (subject: Subject, acc: NonNullable<ReturnType<typeof samples.get>>, added: Awaited<ReturnType<typeof addPod>>, measured: boolean): Promise<void> => {
    const { del, delError } = await delPod(subject, added);
    acc.runs.push({ ...added, del, ...(delError !== undefined ? { delError } : {}) });
    if (delError !== undefined) acc.failures.push(`DEL ${added.pod.name}: ${delError}`);
    if (measured && added.addError === undefined && delError === undefined) acc.del.push(del.ms);
    if (!churn) return;
    // The namespace goes now, and a host veth left behind would go with it: look for one first.
    const present = hostLinks();
    const left = added.result !== undefined ? hostSideLinksOf(added.result, subject.bridge).filter((l) => present.has(l)) : [];
    if (left.length) churnLeaks.set(subject.name, [...(churnLeaks.get(subject.name) ?? []), ...left.map((l) => `link ${l}`)]);
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
      const pod = newPod('default', `bench-${subject.tag}-${mode}${i}`, netnsPath(`${prefix}-${subject.tag}-${mode}${i}`));
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
    const leaks = [...(churnLeaks.get(subject.name) ?? []), ...(await leaksOf(subject, acc.runs, before.get(subject.name) ?? new Set()))];
    figures.set(subject.name, { add: summarize(acc.add), del: summarize(acc.del), failures: acc.failures, leaks });
  }
  deleteNetns(netnsNames);
  return figures;
}

// ---------------------------------------------------------------------------------------------
// 3. Bursts: N pods at concurrency c, then all deleted

interface BurstFigures {
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

async function measureBurst(teardown: Teardown, prefix: string, subject: Subject, pods: number, concurrency: number): Promise<BurstFigures> {
  const names = Array.from({ length: pods }, (_, i) => `${prefix}-${subject.tag}-c${concurrency}-${i}`);
  createNetns(teardown, names);
  try {
    const before = new Set(await subject.leftovers());
    const podList = names.map((n, i) => newPod('default', `bench-${subject.tag}-c${concurrency}-${i}`, `/var/run/netns/${n}`));
    let t0 = process.hrtime.bigint();
    const added = await mapLimit(podList, concurrency, (pod) => addPod(subject, pod));
    const addWallMs = Number(process.hrtime.bigint() - t0) / 1e6;
    t0 = process.hrtime.bigint();
    const deleted = await mapLimit(added, concurrency, (a) => delPod(subject, a));
    const delWallMs = Number(process.hrtime.bigint() - t0) / 1e6;
    const runs: PodRun[] = added.map((a, i) => ({ ...a, ...deleted[i] }) as PodRun);
    const owners = new Map<string, number>();
    for (const r of runs) for (const a of r.result !== undefined ? addressesOf(r.result) : []) owners.set(a, (owners.get(a) ?? 0) + 1);
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
        ...new Set(runs.flatMap((r) => [...(r.addError !== undefined ? [`ADD: ${r.addError}`] : []), ...(r.delError !== undefined ? [`DEL: ${r.delError}`] : [])])),
      ].slice(0, 5),
    };
  } finally {
    deleteNetns(names);
  }
}

// ---------------------------------------------------------------------------------------------
// 2. What the executable itself costs: VERSION through the shim vs the same request in-process

interface ShimFigures {
  readonly versionViaShim: Summary;
  readonly versionInProcess: Summary;
  readonly execFloor: Summary;
  readonly overheadMedianMs: number;
  readonly shimPeakRssKiB: { readonly version?: number; readonly add?: number; readonly del?: number };
  readonly shimBinaryBytes: number;
  readonly reference?: { readonly version?: number; readonly add?: number; readonly del?: number };
}

async function execTrue(): Promise<number> {
  const t0 = process.hrtime.bigint();
  await new Promise<void>((resolve, reject) => spawn('/bin/true', [], { stdio: 'ignore' }).on('error', reject).on('close', () => resolve()));
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

/** Max of a few /usr/bin/time -f %M readings for VERSION, ADD and DEL of one plugin. */
async function peakRss(teardown: Teardown, prefix: string, subject: Subject, samples: number): Promise<{ version?: number; add?: number; del?: number }> {
  if (!existsSync(TIME_BINARY)) return {};
  const names = Array.from({ length: samples }, (_, i) => `${prefix}-${subject.tag}-m${i}`);
  createNetns(teardown, names);
  const max = (xs: (number | undefined)[]): number | undefined => (xs.some((x) => x !== undefined) ? Math.max(...xs.filter((x): x is number => x !== undefined)) : undefined);
  const version: (number | undefined)[] = [];
  const add: (number | undefined)[] = [];
  const del: (number | undefined)[] = [];
  try {
    for (const [i, name] of names.entries()) {
      version.push((await invoke(subject.plugin, 'VERSION', undefined, { measureRss: true })).maxRssKiB);
      const pod = newPod('default', `bench-${subject.tag}-m${i}`, `/var/run/netns/${name}`);
      const a = await invoke(subject.plugin, 'ADD', pod, { measureRss: true });
      const parsed = parseAdd(a);
      if (parsed.ok) {
        add.push(a.maxRssKiB);
        for (const l of hostSideLinksOf(parsed.result, subject.bridge)) hostLinksCreated.get(subject.name)?.add(l);
      }
      const d = await invoke(subject.plugin, 'DEL', pod, { measureRss: true, ...(parsed.ok ? { prevResult: parsed.result } : {}) });
      if (d.exitCode === 0) del.push(d.maxRssKiB);
    }
  } finally {
    deleteNetns(names);
  }
  const out: { version?: number; add?: number; del?: number } = {};
  const v = max(version), a = max(add), d = max(del);
  if (v !== undefined) out.version = v;
  if (a !== undefined) out.add = a;
  if (d !== undefined) out.del = d;
  return out;
}

async function measureShim(teardown: Teardown, prefix: string, plexus: Subject, daemon: Plexusd, reference: Subject | undefined, calls: number): Promise<ShimFigures> {
  const config = JSON.stringify(plexus.plugin.config);
  const body = JSON.stringify({ env: { CNI_COMMAND: 'VERSION', CNI_PATH: plexus.plugin.env['CNI_PATH'] ?? '' }, stdin: config });
  const check = await httpOverSocket(daemon.socket, 'POST', '/v1/cni', body);
  if (check.status !== 200 || check.headers['x-cni-exit-code'] !== '0') throw new Error(`in-process VERSION: HTTP ${check.status}: ${check.body}`);
  const viaShim: number[] = [];
  const inProcess: number[] = [];
  const floor: number[] = [];
  for (let i = 0; i < WARMUP + calls; i++) {
    const shim = await invoke(plexus.plugin, 'VERSION', undefined);
    if (shim.exitCode !== 0) throw new Error(`VERSION through the shim: ${describeFailure(shim)}`);
    const t0 = process.hrtime.bigint();
    const reply = await httpOverSocket(daemon.socket, 'POST', '/v1/cni', body);
    const http = Number(process.hrtime.bigint() - t0) / 1e6;
    if (reply.status !== 200) throw new Error(`in-process VERSION: HTTP ${reply.status}`);
    const t = await execTrue();
    if (i < WARMUP) continue;
    viaShim.push(shim.ms);
    inProcess.push(http);
    floor.push(t);
  }
  const versionViaShim = summarize(viaShim);
  const versionInProcess = summarize(inProcess);
  return {
    versionViaShim,
    versionInProcess,
    execFloor: summarize(floor),
    overheadMedianMs: round(versionViaShim.median - versionInProcess.median),
    shimPeakRssKiB: await peakRss(teardown, prefix, plexus, 3),
    shimBinaryBytes: statSync(shimBinary()).size,
    ...(reference !== undefined ? { reference: await peakRss(teardown, prefix, reference, 3) } : {}),
  };
}

// ---------------------------------------------------------------------------------------------
// 4. ADD/DEL latency of pods with 1, 2 and 4 interfaces: Plexus vs the reference runtime, interleaved

interface MultiVariant {
  /** `1`, `2`, `4`, `4d`: interfaces per pod (`d`: one of them delegated). */
  readonly key: string;
  readonly networks: string;
  readonly runtimes: readonly MultiRuntime[];
}

interface MultiLatency {
  /** variant key -> runtime name -> figures; leaks here are links in the results and links left in the pods. */
  readonly figures: Record<string, Record<string, LatencyFigures>>;
  /** runtime name -> ports left on its bridges and new leases/records, after every variant's pods were deleted. */
  readonly sharedLeaks: Record<string, string[]>;
}

/** Links a runtime's pods left: host links their results named, and anything but lo in their (still existing) netns. */
function multiLinkLeaks(runtime: MultiRuntime, adds: readonly MultiAdd[], netnsNames: readonly string[]): string[] {
  const present = hostLinks();
  const links = new Set<string>();
  for (const a of adds) for (const l of hostLinksOfAdd(a, runtime.bridges)) if (present.has(l)) links.add(`link ${l}`);
  for (const n of netnsNames) for (const l of podLinks(n)) links.add(`pod link ${n}:${l}`);
  return [...links];
}

function bridgePorts(bridges: readonly string[]): string[] {
  return bridges.flatMap((b) => linksOfBridge(b).map((l) => `port ${b}:${l}`));
}

function trackHostLinks(runtime: MultiRuntime, added: MultiAdd): void {
  const links = hostLinksCreated.get(runtime.name) ?? new Set<string>();
  for (const l of hostLinksOfAdd(added, runtime.bridges)) links.add(l);
  hostLinksCreated.set(runtime.name, links);
}

async function measureMultiLatency(teardown: Teardown, prefix: string, variants: readonly MultiVariant[], iterations: number): Promise<MultiLatency> {
  const total = WARMUP + iterations;
  const netnsOf = (v: MultiVariant, r: MultiRuntime, i: number): string => `${prefix}-${r.tag}${v.key}-${i}`;
  const names = variants.flatMap((v) => v.runtimes.flatMap((r) => Array.from({ length: total }, (_, i) => netnsOf(v, r, i))));
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
    const figures: Record<string, Record<string, LatencyFigures>> = {};
    for (const v of variants) {
      const row: Record<string, LatencyFigures> = {};
      for (const r of v.runtimes) {
        const a = acc.get(r) as Acc;
        const netns = Array.from({ length: total }, (_, i) => netnsOf(v, r, i));
        row[r.name] = { add: summarize(a.add), del: summarize(a.del), failures: a.failures, leaks: multiLinkLeaks(r, a.adds, netns) };
      }
      figures[v.key] = row;
    }
    const sharedLeaks: Record<string, string[]> = {};
    for (const [name, rs] of families) {
      const was = before.get(name) ?? new Set<string>();
      const bridges = [...new Set(rs.flatMap((r) => r.bridges))];
      sharedLeaks[name] = [...bridgePorts(bridges), ...(await (rs[0] as MultiRuntime).leftovers()).filter((l) => !was.has(l))];
    }
    return { figures, sharedLeaks };
  } finally {
    deleteNetns(names);
  }
}

// ---------------------------------------------------------------------------------------------
// 5. A burst of pods with 3 networks each

interface MultiBurstFigures extends BurstFigures {
  readonly interfaces: number;
  /** plexusd's peak RSS during this burst (VmHWM reset just before it), for the plexus runtime. */
  readonly daemonPeakRssKiB?: number;
}

async function measureMultiBurst(teardown: Teardown, prefix: string, runtime: MultiRuntime, pods: number, concurrency: number, daemon: Plexusd | undefined): Promise<MultiBurstFigures> {
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
      errors: [...new Set([...added.flatMap((a) => (a.error !== undefined ? [`ADD: ${a.error}`] : [])), ...deleted.flatMap((d) => (d.error !== undefined ? [`DEL: ${d.error}`] : []))])].slice(0, 5),
      ...(peak !== undefined ? { daemonPeakRssKiB: peak } : {}),
    };
  } finally {
    deleteNetns(names);
  }
}

// ---------------------------------------------------------------------------------------------

interface MultiReport {
  readonly variants: { readonly key: string; readonly interfaces: number; readonly networks: string }[];
  readonly latency: MultiLatency;
  /** variant key -> plexus/reference of the medians. */
  readonly ratios: Record<string, { readonly addMedian: number; readonly delMedian: number }>;
  /** (median ADD of the all-native 4-interface variant - median ADD with 1 interface) / 3, per runtime. */
  readonly marginalAddMs: Record<string, number>;
  readonly burst: MultiBurstFigures[];
}

interface Report {
  readonly machine: ReturnType<typeof machine>;
  readonly command: string;
  readonly startedAt: string;
  readonly durationSeconds: number;
  readonly settings: { readonly iterations: number; readonly warmup: number; readonly burst: number; readonly concurrency: readonly number[]; readonly shimCalls: number };
  readonly subjects: { readonly name: string; readonly binary: string; readonly config: unknown }[];
  readonly latency: Record<string, LatencyFigures>;
  readonly ratios: Record<string, { readonly addMedian: number; readonly delMedian: number }>;
  /** Section 1 again as a churn: each ADD right after the same subject's DEL of its previous pod. */
  readonly latencyChurn: Record<string, LatencyFigures>;
  readonly ratiosChurn: Record<string, { readonly addMedian: number; readonly delMedian: number }>;
  readonly shim?: ShimFigures;
  readonly bursts: BurstFigures[];
  readonly multi?: MultiReport;
  readonly daemon?: { readonly peakRssKiB?: number; readonly exitCode?: number | null };
  readonly problems: string[];
}

const kib = (x: number | undefined): string => (x === undefined ? 'n/a' : `${(x / 1024).toFixed(1)} MiB`);

function render(report: Report, markdown: boolean): string {
  const t = markdown ? markdownTable : table;
  const out: string[] = [];
  const head = (s: string): void => void out.push('', markdown ? `### ${s}` : `== ${s}`, '');
  const latencyTable = (title: string, latency: Report['latency'], ratioMap: Report['ratios']): void => {
    head(title);
    out.push(
      t(
        ['subject', 'ADD median', 'ADD p90', 'ADD min', 'ADD max', 'DEL median', 'DEL p90', 'DEL min', 'DEL max', 'failures'],
        Object.entries(latency).map(([name, f]) => [
          name, fmt(f.add.median), fmt(f.add.p90), fmt(f.add.min), fmt(f.add.max), fmt(f.del.median), fmt(f.del.p90), fmt(f.del.min), fmt(f.del.max), String(f.failures.length),
        ]),
      ),
    );
    const ratios = Object.entries(ratioMap);
    if (ratios.length > 0) {
      out.push('');
      for (const [name, r] of ratios) out.push(`${markdown ? '- ' : ''}${name}: ADD median ${fmt(r.addMedian, 2)}x, DEL median ${fmt(r.delMedian, 2)}x`);
    }
  };
  latencyTable(`ADD / DEL latency, 1 interface, ${report.settings.iterations} iterations (ms)`, report.latency, report.ratios);
  latencyTable(`ADD / DEL latency, 1 interface, churn: each ADD right after the same subject's DEL, ${report.settings.iterations} iterations (ms)`, report.latencyChurn, report.ratiosChurn);
  if (report.shim !== undefined) {
    const s = report.shim;
    head(`plexus-cni executable overhead (${report.settings.shimCalls} VERSION calls, ms)`);
    out.push(
      t(
        ['path', 'median', 'p90', 'min', 'max'],
        [
          ['VERSION via bin/plexus-cni -> plexusd', fmt(s.versionViaShim.median, 2), fmt(s.versionViaShim.p90, 2), fmt(s.versionViaShim.min, 2), fmt(s.versionViaShim.max, 2)],
          ['VERSION as in-process HTTP request', fmt(s.versionInProcess.median, 2), fmt(s.versionInProcess.p90, 2), fmt(s.versionInProcess.min, 2), fmt(s.versionInProcess.max, 2)],
          ['spawn /bin/true (exec floor)', fmt(s.execFloor.median, 2), fmt(s.execFloor.p90, 2), fmt(s.execFloor.min, 2), fmt(s.execFloor.max, 2)],
        ],
      ),
    );
    out.push('');
    out.push(`${markdown ? '- ' : ''}shim overhead (median via shim - median in-process): ${fmt(s.overheadMedianMs, 2)} ms`);
    out.push(
      `${markdown ? '- ' : ''}peak RSS (${existsSync(TIME_BINARY) ? '/usr/bin/time %M' : 'n/a (install time)'}): plexus-cni VERSION ${kib(s.shimPeakRssKiB.version)}, ADD ${kib(s.shimPeakRssKiB.add)}, DEL ${kib(s.shimPeakRssKiB.del)}` +
        (s.reference !== undefined ? `; reference bridge VERSION ${kib(s.reference.version)}, ADD ${kib(s.reference.add)}, DEL ${kib(s.reference.del)}` : ''),
    );
    out.push(`${markdown ? '- ' : ''}bin/plexus-cni size: ${(s.shimBinaryBytes / 1024).toFixed(0)} KiB (static)`);
  }
  if (report.bursts.length > 0) {
    head(`Bursts of ${report.settings.burst} pods (ADD all, then DEL all)`);
    out.push(
      t(
        ['subject', 'conc.', 'ADD wall s', 'pods/s', 'ADD p50 ms', 'ADD p90 ms', 'DEL wall s', 'ADD fail', 'DEL fail', 'dup IPs', 'leaks'],
        report.bursts.map((b) => [
          b.subject, String(b.concurrency), fmt(b.addWallMs / 1000, 2), fmt(b.addPodsPerSecond), fmt(b.add.median), fmt(b.add.p90), fmt(b.delWallMs / 1000, 2),
          String(b.addFailures), String(b.delFailures), String(b.duplicateIps.length), String(b.leaks.length),
        ]),
      ),
    );
  }
  if (report.daemon !== undefined) {
    out.push('');
    out.push(`${markdown ? '- ' : ''}plexusd peak RSS (VmHWM after sections 1-3): ${kib(report.daemon.peakRssKiB)}`);
  }
  const m = report.multi;
  if (m !== undefined) {
    head(`ADD / DEL latency by interfaces per pod, ${report.settings.iterations} iterations (ms)`);
    const rows: string[][] = [];
    for (const v of m.variants) {
      for (const [name, f] of Object.entries(m.latency.figures[v.key] ?? {})) {
        rows.push([
          v.key, name, fmt(f.add.median), fmt(f.add.p90), fmt(f.add.min), fmt(f.add.max), fmt(f.del.median), fmt(f.del.p90), fmt(f.del.min), fmt(f.del.max),
          String(f.failures.length), m.ratios[v.key] !== undefined && name === 'plexus' ? `${fmt(m.ratios[v.key]?.addMedian, 2)}x` : '',
        ]);
      }
    }
    out.push(t(['ifs', 'runtime', 'ADD median', 'ADD p90', 'ADD min', 'ADD max', 'DEL median', 'DEL p90', 'DEL min', 'DEL max', 'failures', 'ADD ratio'], rows));
    out.push('');
    const li = markdown ? '- ' : '';
    for (const v of m.variants) out.push(`${li}${v.key}: ${v.networks}`);
    for (const v of m.variants) {
      const r = m.ratios[v.key];
      if (r !== undefined) out.push(`${li}${v.key} interface(s): plexus/reference ADD median ${fmt(r.addMedian, 2)}x, DEL median ${fmt(r.delMedian, 2)}x`);
    }
    const r4 = m.ratios['4'];
    if (r4 !== undefined) out.push(`${li}4-interface ADD (all run natively by plexus), plexus/reference: ${fmt(r4.addMedian, 2)}x (target <= 0.25x: ${r4.addMedian <= 0.25 ? 'met' : 'not met'})`);
    const r4d = m.ratios['4d'];
    if (r4d !== undefined) out.push(`${li}4-interface ADD with ptp delegated by plexus (an exec of ptp + host-local, as for the reference), plexus/reference: ${fmt(r4d.addMedian, 2)}x`);
    const marginal = Object.entries(m.marginalAddMs);
    if (marginal.length > 0) {
      out.push(`${li}marginal ADD cost per extra interface, from the all-native variant ((median ADD 4 - median ADD 1) / 3): ${marginal.map(([n, x]) => `${n} ${fmt(x, 2)} ms`).join(', ')}`);
    }
    const shared = Object.entries(m.latency.sharedLeaks).filter(([, l]) => l.length > 0);
    out.push(`${li}leaks after the latency runs (host links, pod links, bridge ports, leases, journal): ${shared.length === 0 && Object.values(m.latency.figures).every((row) => Object.values(row).every((f) => f.leaks.length === 0)) ? 'none' : 'see problems'}`);
    if (m.burst.length > 0) {
      const b0 = m.burst[0] as MultiBurstFigures;
      head(`Burst of ${b0.pods} pods with 3 networks each (bridge + macvlan + bridge2, all native for plexus), concurrency ${b0.concurrency}`);
      out.push(
        t(
          ['runtime', 'ADD wall s', 'pods/s', 'ADD p50 ms', 'ADD p90 ms', 'DEL wall s', 'ADD fail', 'DEL fail', 'dup IPs', 'leaks'],
          m.burst.map((b) => [
            b.subject, fmt(b.addWallMs / 1000, 2), fmt(b.addPodsPerSecond), fmt(b.add.median), fmt(b.add.p90), fmt(b.delWallMs / 1000, 2),
            String(b.addFailures), String(b.delFailures), String(b.duplicateIps.length), String(b.leaks.length),
          ]),
        ),
      );
      const px = m.burst.find((b) => b.daemonPeakRssKiB !== undefined);
      if (px !== undefined) out.push('', `${li}plexusd peak RSS during this burst (VmHWM reset just before it): ${kib(px.daemonPeakRssKiB)}`);
    }
  }
  return out.join('\n');
}

async function main(): Promise<number> {
  const options = parseOptions(process.argv.slice(2));
  const started = Date.now();
  const teardown = new Teardown();
  teardown.onSignal(abortCalls);
  const prefix = uniquePrefix('pxb');
  // State lives where nodes keep it (/var/lib: plexusd's --state-dir default, host-local's /var/lib/cni), for
  // both subjects alike: on some disks creating files in /tmp costs several times more than in /var/lib.
  const stateParent = options.stateParent ?? '/var/lib';
  await mkdir(stateParent, { recursive: true });
  const root = await mkdtemp(join(stateParent, `${prefix}-`));
  teardown.add(`remove ${root}`, () => rm(root, { recursive: true, force: true }));
  restoreForwardingOnTeardown(teardown);
  const problems: string[] = [];
  let exitCode = 0;
  try {
    const m = machine();
    console.log(`Plexus bench ${prefix}: ${m.cpus} CPUs (${m.cpuModel}), kernel ${m.kernel}, node ${m.node}`);
    const subjects: Subject[] = [];
    let daemon: Plexusd | undefined;
    let plexus: Subject | undefined;
    let reference: Subject | undefined;
    const taken: number[] = [];
    // Multi-interface sections: a veth standing in for a host uplink (the macvlan master), shared by both runtimes.
    const uplink = `${prefix}up`;
    if (options.multi && (options.plexus || options.reference)) createUplink(teardown, uplink, `${prefix}upp`);
    const plexusMulti: { plugin?: Plugin; bridges: string[]; leftovers?: () => Promise<string[]>; subnet?: number } = { bridges: [] };
    const referenceMulti: { networks: Record<string, Plugin>; bridges: string[]; leftovers?: () => Promise<string[]>; subnet?: number } = { networks: {}, bridges: [] };
    if (options.plexus) {
      const second = freeTenNet(150, 199, taken);
      taken.push(second);
      const networksDir = join(root, 'networks');
      await mkdir(networksDir);
      const bridge = `${prefix}pb`;
      teardown.add(`delete bridge ${bridge}`, () => deleteLinkIfPresent(bridge));
      await writeNetworkDefinition(networksDir, 'default', 'podnet', {
        cniVersion: '1.1.0', name: 'podnet', type: 'bridge', bridge, isGateway: true, isDefaultGateway: true, ipMasq: false,
        ipam: { type: 'host-local', ranges: [[{ subnet: `10.${second}.0.0/16` }]] },
      });
      const pxHostLocal = join(root, 'px-host-local');
      if (options.multi) {
        const s2 = freeTenNet(150, 199, taken);
        taken.push(s2);
        plexusMulti.subnet = s2;
        const bridge2 = `${prefix}p2`;
        teardown.add(`delete bridge ${bridge2}`, () => deleteLinkIfPresent(bridge2));
        plexusMulti.bridges.push(bridge, bridge2);
        const ipam = (i: number, extra: Record<string, unknown> = {}): Record<string, unknown> => ({ type: 'host-local', ranges: [[{ subnet: `10.${s2}.${i}.0/24` }]], ...extra });
        await writeNetworkDefinition(networksDir, 'default', 'mv', { cniVersion: '1.1.0', name: 'mv', type: 'macvlan', master: uplink, mode: 'bridge', ipam: ipam(1) });
        await writeNetworkDefinition(networksDir, 'default', 'br2', { cniVersion: '1.1.0', name: 'br2', type: 'bridge', bridge: bridge2, isGateway: true, ipMasq: false, ipam: ipam(2) });
        await writeNetworkDefinition(networksDir, 'default', 'ptpnet', { cniVersion: '1.0.0', name: 'ptpnet', type: 'ptp', ipMasq: false, ipam: ipam(3) });
        // The same kind of network, forced to delegation: plexusd execs /usr/lib/cni/ptp (+ host-local) for it.
        await writeNetworkDefinition(networksDir, 'default', 'ptpdel', { cniVersion: '1.0.0', name: 'ptpdel', type: 'ptp', ipMasq: false, ipam: ipam(4, { dataDir: pxHostLocal }) }, { 'plexus.io/delegate': 'true' });
      }
      daemon = await Plexusd.start(teardown, {
        root: join(root, 'plexusd'), networksDir, defaultNetwork: 'default/podnet', cniBinDir: REFERENCE_DIR, logLevel: 'error',
        ...(options.stateSync !== undefined ? { stateSync: options.stateSync } : {}),
      });
      const d = daemon;
      plexus = {
        name: 'plexus',
        tag: 'px',
        plugin: {
          binary: shimBinary(),
          config: { cniVersion: '1.1.0', name: 'plexus', type: 'plexus-cni', socketPath: d.socket },
          env: { CNI_PATH: `${join(repoRoot(), 'bin')}:${REFERENCE_DIR}` },
        },
        bridge,
        leftovers: () => d.leftovers(),
      };
      subjects.push(plexus);
      plexusMulti.plugin = plexus.plugin;
      plexusMulti.leftovers = async () => [...(await d.leftovers()), ...(await hostLocalLeftovers(pxHostLocal, 'ptpdel'))];
      console.log(`  plexus:    bin/plexus-cni -> plexusd pid ${d.pid}, bridge ${bridge}, 10.${second}.0.0/16`);
    }
    if (options.reference) {
      const second = freeTenNet(150, 199, taken);
      taken.push(second);
      const bridge = `${prefix}rb`;
      teardown.add(`delete bridge ${bridge}`, () => deleteLinkIfPresent(bridge));
      const dataDir = join(root, 'host-local');
      reference = describeSubject('reference', 'rf', {
        binary: join(REFERENCE_DIR, 'bridge'),
        // The Debian plugins (1.1.1) speak CNI up to 1.0.0.
        config: {
          cniVersion: '1.0.0', name: `${prefix}-ref`, type: 'bridge', bridge, isGateway: true, isDefaultGateway: true, ipMasq: false,
          ipam: { type: 'host-local', ranges: [[{ subnet: `10.${second}.0.0/16` }]], dataDir },
        },
        env: { CNI_PATH: REFERENCE_DIR },
      });
      subjects.push(reference);
      console.log(`  reference: ${REFERENCE_DIR}/bridge + host-local, bridge ${bridge}, 10.${second}.0.0/16`);
      if (options.multi) {
        const s2 = freeTenNet(150, 199, taken);
        taken.push(s2);
        referenceMulti.subnet = s2;
        const bridge2 = `${prefix}r2`;
        teardown.add(`delete bridge ${bridge2}`, () => deleteLinkIfPresent(bridge2));
        referenceMulti.bridges.push(bridge, bridge2);
        const ipam = (i: number): Record<string, unknown> => ({ type: 'host-local', ranges: [[{ subnet: `10.${s2}.${i}.0/24` }]], dataDir });
        const plugin = (type: string, name: string, config: Record<string, unknown>): Plugin => ({
          binary: join(REFERENCE_DIR, type), config: { cniVersion: '1.0.0', name, type, ...config }, env: { CNI_PATH: REFERENCE_DIR },
        });
        referenceMulti.networks = {
          bridge: reference.plugin,
          mv: plugin('macvlan', `${prefix}-rmv`, { master: uplink, mode: 'bridge', ipam: ipam(1) }),
          br2: plugin('bridge', `${prefix}-rbr2`, { bridge: bridge2, isGateway: true, ipMasq: false, ipam: ipam(2) }),
          ptp: plugin('ptp', `${prefix}-rptp`, { ipMasq: false, ipam: ipam(3) }),
        };
        const names = Object.values(referenceMulti.networks).map((p) => String(p.config['name']));
        referenceMulti.leftovers = async () => (await Promise.all(names.map((n) => hostLocalLeftovers(dataDir, n)))).flat();
      }
    }
    // The multi-interface variants: the same networks through Plexus (one call, annotation) and the reference runtime.
    const variants: MultiVariant[] = [];
    let burstRuntimes: MultiRuntime[] = [];
    if (options.multi) {
      const defs = [
        { key: '1', networks: 'bridge', selection: [] as string[], reference: ['bridge'] },
        { key: '2', networks: 'bridge + macvlan', selection: ['mv'], reference: ['bridge', 'mv'] },
        { key: '4', networks: 'bridge + macvlan + bridge2 + ptp (all native in plexus)', selection: ['mv', 'br2', 'ptpnet'], reference: ['bridge', 'mv', 'br2', 'ptp'] },
        { key: '4d', networks: 'bridge + macvlan + bridge2 + ptp (plexus delegates ptp)', selection: ['mv', 'br2', 'ptpdel'], reference: ['bridge', 'mv', 'br2', 'ptp'] },
        { key: 'burst', networks: 'bridge + macvlan + bridge2', selection: ['mv', 'br2'], reference: ['bridge', 'mv', 'br2'] },
      ];
      const build = (d: (typeof defs)[number]): MultiRuntime[] => {
        const out: MultiRuntime[] = [];
        if (plexusMulti.plugin !== undefined && plexusMulti.leftovers !== undefined) {
          out.push(plexusRuntime({ name: 'plexus', tag: 'px', plugin: plexusMulti.plugin, selection: d.selection.join(', '), interfaces: d.reference.length, bridges: plexusMulti.bridges, leftovers: plexusMulti.leftovers }));
        }
        if (referenceMulti.leftovers !== undefined) {
          const networks = d.reference.map((k, i) => ({ ifname: i === 0 ? 'eth0' : `net${i}`, plugin: referenceMulti.networks[k] as Plugin }));
          out.push(referenceRuntime({ name: 'reference', tag: 'rf', networks, bridges: referenceMulti.bridges, leftovers: referenceMulti.leftovers }));
        }
        return out;
      };
      for (const d of defs) {
        if (d.key === 'burst') burstRuntimes = build(d);
        else variants.push({ key: d.key, networks: d.networks, runtimes: build(d) });
      }
      if (variants.some((v) => v.runtimes.length > 0)) {
        console.log(`  multi-interface: uplink ${uplink} (veth); plexus networks mv, br2 (${prefix}p2), ptpnet (native), ptpdel (delegated) in 10.${String(plexusMulti.subnet ?? '-')}.0.0/16; ` +
          `reference runtime macvlan, bridge (${prefix}r2), ptp in 10.${String(referenceMulti.subnet ?? '-')}.0.0/16`);
      }
    }
    for (const [i, spec] of options.extra.entries()) {
      const s = parseSubjectSpec(spec, `x${i}`);
      if (subjects.some((other) => other.name === s.name)) throw new Error(`--subject ${s.name}: a subject with that name already exists`);
      subjects.push(s);
      // A bridge that did not exist before the run was made by the run: remove it afterwards.
      const b = s.bridge;
      if (b !== undefined && !linkExists(b)) teardown.add(`delete bridge ${b}`, () => deleteLinkIfPresent(b));
      console.log(`  ${s.name}: ${s.plugin.binary}${s.bridge !== undefined ? `, bridge ${s.bridge}` : ''}`);
    }
    if (subjects.length === 0) throw new Error('no subject to measure');
    teardown.add('delete host links the pods left', () => {
      const present = hostLinks();
      for (const links of hostLinksCreated.values()) for (const l of links) if (present.has(l)) deleteLinkIfPresent(l);
    });

    console.log('\n1. ADD/DEL latency');
    const latency = await measureLatency(teardown, prefix, subjects, options.iterations);
    console.log('1c. ADD/DEL latency in churn');
    const latencyChurn = await measureLatency(teardown, prefix, subjects, options.iterations, true);

    let shim: ShimFigures | undefined;
    if (plexus !== undefined && daemon !== undefined) {
      console.log('2. plexus-cni overhead');
      shim = await measureShim(teardown, prefix, plexus, daemon, reference, options.shimCalls);
    }

    console.log('3. bursts');
    const bursts: BurstFigures[] = [];
    for (const [level, c] of options.concurrency.entries()) {
      for (const [k] of subjects.entries()) {
        const subject = subjects[(k + level) % subjects.length] as Subject;
        const b = await measureBurst(teardown, prefix, subject, options.burst, c);
        bursts.push(b);
        console.log(`  ${subject.name} c=${c}: ${fmt(b.addPodsPerSecond)} pods/s, ${b.addFailures + b.delFailures} failures, ${b.duplicateIps.length} duplicate IPs, ${b.leaks.length} leaks`);
      }
    }
    bursts.sort((a, b) => subjects.findIndex((s) => s.name === a.subject) - subjects.findIndex((s) => s.name === b.subject) || a.concurrency - b.concurrency);

    // VmHWM now covers sections 1-3; the multi-interface burst resets it to measure itself.
    const daemonPeak = daemon?.peakRssKiB();

    let multi: MultiReport | undefined;
    if (variants.some((v) => v.runtimes.length > 0)) {
      console.log('4. ADD/DEL latency with 1, 2 and 4 interfaces');
      const latencyMulti = await measureMultiLatency(teardown, prefix, variants, options.iterations);
      console.log(`5. burst of ${options.burst} pods with 3 networks, concurrency ${options.multiConcurrency}`);
      const burst: MultiBurstFigures[] = [];
      for (const r of burstRuntimes) {
        const b = await measureMultiBurst(teardown, prefix, r, options.burst, options.multiConcurrency, r.name === 'plexus' ? daemon : undefined);
        burst.push(b);
        console.log(`  ${r.name}: ${fmt(b.addPodsPerSecond)} pods/s, ${b.addFailures + b.delFailures} failures, ${b.duplicateIps.length} duplicate IPs, ${b.leaks.length} leaks`);
      }
      const ratiosMulti: MultiReport['ratios'] = {};
      for (const v of variants) {
        const px = latencyMulti.figures[v.key]?.['plexus'];
        const rf = latencyMulti.figures[v.key]?.['reference'];
        if (px !== undefined && rf !== undefined) ratiosMulti[v.key] = { addMedian: round(px.add.median / rf.add.median), delMedian: round(px.del.median / rf.del.median) };
      }
      const marginalAddMs: Record<string, number> = {};
      for (const name of ['plexus', 'reference']) {
        const one = latencyMulti.figures['1']?.[name];
        const four = latencyMulti.figures['4']?.[name];
        if (one !== undefined && four !== undefined) marginalAddMs[name] = round((four.add.median - one.add.median) / 3);
      }
      multi = {
        variants: variants.map((v) => ({ key: v.key, interfaces: v.runtimes[0]?.interfaces ?? 0, networks: v.networks })),
        latency: latencyMulti,
        ratios: ratiosMulti,
        marginalAddMs,
        burst,
      };
      for (const [key, row] of Object.entries(latencyMulti.figures)) {
        for (const [name, f] of Object.entries(row)) {
          for (const e of f.failures.slice(0, 5)) problems.push(`${name} ${key}-interface latency: ${e}`);
          for (const l of f.leaks) problems.push(`${name} ${key}-interface latency leak: ${l}`);
        }
      }
      for (const [name, leaks] of Object.entries(latencyMulti.sharedLeaks)) for (const l of leaks) problems.push(`${name} multi-interface latency leak: ${l}`);
      for (const b of burst) {
        for (const e of b.errors) problems.push(`${b.subject} 3-network burst: ${e}`);
        for (const d of b.duplicateIps) problems.push(`${b.subject} 3-network burst: duplicate IP ${d}`);
        for (const l of b.leaks) problems.push(`${b.subject} 3-network burst leak: ${l}`);
      }
    }

    const daemonExit = daemon !== undefined ? await daemon.stop() : undefined;

    for (const [section, figures] of [['latency', latency], ['churn latency', latencyChurn]] as const) {
      for (const [name, f] of figures) {
        for (const e of f.failures.slice(0, 5)) problems.push(`${name} ${section}: ${e}`);
        for (const l of f.leaks) problems.push(`${name} ${section} leak: ${l}`);
      }
    }
    for (const b of bursts) {
      for (const e of b.errors) problems.push(`${b.subject} c=${b.concurrency}: ${e}`);
      for (const d of b.duplicateIps) problems.push(`${b.subject} c=${b.concurrency}: duplicate IP ${d}`);
      for (const l of b.leaks) problems.push(`${b.subject} c=${b.concurrency} leak: ${l}`);
    }
    if (daemonExit !== undefined && daemonExit !== 0) problems.push(`plexusd exited with ${String(daemonExit)} on SIGTERM`);

    const ratiosOf = (figures: Map<string, LatencyFigures>): Report['ratios'] => {
      const ratios: Report['ratios'] = {};
      const ref = figures.get('reference');
      if (ref !== undefined) {
        for (const [name, f] of figures) {
          if (name !== 'reference') ratios[`${name}/reference`] = { addMedian: round(f.add.median / ref.add.median), delMedian: round(f.del.median / ref.del.median) };
        }
      }
      return ratios;
    };
    const ratios = ratiosOf(latency);
    const report: Report = {
      machine: m,
      command: `node dist/scripts/bench.js ${process.argv.slice(2).join(' ')}`.trim(),
      startedAt: new Date(started).toISOString(),
      durationSeconds: round((Date.now() - started) / 1000, 1),
      settings: { iterations: options.iterations, warmup: WARMUP, burst: options.burst, concurrency: options.concurrency, shimCalls: options.shimCalls },
      subjects: subjects.map((s) => ({ name: s.name, binary: s.plugin.binary, config: s.plugin.config })),
      latency: Object.fromEntries(latency),
      ratios,
      latencyChurn: Object.fromEntries(latencyChurn),
      ratiosChurn: ratiosOf(latencyChurn),
      ...(shim !== undefined ? { shim } : {}),
      bursts,
      ...(multi !== undefined ? { multi } : {}),
      ...(daemon !== undefined ? { daemon: { ...(daemonPeak !== undefined ? { peakRssKiB: daemonPeak } : {}), exitCode: daemonExit ?? null } } : {}),
      problems,
    };
    console.log(render(report, false));
    if (options.json !== undefined) await writeFile(options.json, `${JSON.stringify(report, null, 2)}\n`);
    if (options.markdown !== undefined) await writeFile(options.markdown, `${render(report, true).trim()}\n`);
    if (problems.length > 0) {
      exitCode = 1;
      console.log(`\nProblems (${problems.length}):`);
      for (const p of problems.slice(0, 30)) console.log(`  - ${p}`);
    }
  } catch (thrown) {
    exitCode = 1;
    if (thrown instanceof CallsAborted) console.error('\nbench interrupted');
    else console.error(`\nbench failed: ${thrown instanceof Error ? (thrown.stack ?? thrown.message) : String(thrown)}`);
  } finally {
    const cleanup = await teardown.run();
    for (const c of cleanup) console.error(`cleanup: ${c}`);
    const leftNetns = listNetns(prefix);
    const leftLinks = [...hostLinks()].filter((l) => l.startsWith(prefix));
    if (cleanup.length > 0 || leftNetns.length > 0 || leftLinks.length > 0) {
      exitCode = 1;
      console.error(`cleanup incomplete: netns ${leftNetns.join(' ') || 'none'}; links ${leftLinks.join(' ') || 'none'}`);
    } else {
      console.log(`\nCleaned up: no netns or links named ${prefix}* left, temp dir removed.`);
    }
  }
  return exitCode;
}

main().then(
  (code) => process.exit(code),
  (thrown: unknown) => {
    console.error(thrown instanceof Error ? thrown.message : thrown);
    process.exit(2);
  },
);
