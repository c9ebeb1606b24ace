/**
 * Section 0: the floor of a 1-interface ADD on this machine, measured by the bench itself, and plexus's ADD as a
 * multiple of it. The floor is what no CNI implementation can avoid: the rtnetlink batch of the attachment
 * (floor-batch.c, or floor-batch.ts through src/kernel, each in a process of its own) plus one exec of a static binary
 * from the runtime (here the bench's Node.js process, which is what every subject's time includes).
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { type Plugin, invoke, newPod } from '../cni';
import { createNetns, deleteLinkIfPresent, deleteNetns, ipBatch, listNetns } from '../host';
import { repoRoot } from '../plexusd';
import { type Summary, fmt, round, summarize } from '../stats';
import type { Teardown } from '../teardown';
import type { FloorBatchSettings } from './floor-batch';
import type { FloorDaemonSettings } from './floor-daemon';
import { WARMUP } from './single';

export interface BatchFigures {
  /** Namespaces made beforehand (as section 1), and made just before each run (as section 1c). */
  readonly interleaved: Summary;
  readonly churn: Summary;
}

export interface FloorFigures {
  /** The rtnetlink batch alone, in C (floor-batch.c): the floor, when a static C compiler is there. */
  readonly batchC?: BatchFigures;
  /** The same batch through src/kernel from Node.js (floor-batch.ts): the floor otherwise. */
  readonly batchNode: BatchFigures;
  /** Exec from the bench's Node.js process, through the harness every subject runs through (stdin, stdout, env). */
  readonly exec: {
    /** `int main(void){return 0;}`, static (the compiler named), the least any plugin can be. */
    readonly staticBinary: Summary;
    /** bin/plexus-cni VERSION with no daemon behind its socket: the shim's own exec, answering locally. */
    readonly shimNoDaemon: Summary;
    readonly compiler: string;
  };
  /**
   * ADD through bin/plexus-cni against floor-daemon.ts, a Node.js daemon that runs only the batch (netns made
   * beforehand): the shim, its socket round trip and the batch in Node.js, without any of plexusd's own work.
   */
  readonly nodeDaemon: Summary;
}

/** plexus's ADD median over the floor (batch median + static exec median), per variant of section 1. */
export interface FloorReport extends FloorFigures {
  readonly addMedian: { readonly interleaved?: number; readonly churn?: number };
  readonly floorMs: { readonly interleaved: number; readonly churn: number };
  readonly addOverFloor: { readonly interleaved?: number; readonly churn?: number };
  /** The minimal Node.js daemon's ADD over the floor (interleaved). */
  readonly nodeDaemonOverFloor: number;
  /** plexus's interleaved ADD median less the minimal Node.js daemon's: plexusd's own work (ms). */
  readonly plexusdOwnMs?: number;
}

const TRUE_SOURCE = 'int main(void) { return 0; }\n';

/** Builds a static executable from one C file, with the first compiler that can (musl-gcc, as the shim, first). */
function buildStatic(
  source: string,
  path: string,
  compilers: readonly string[],
): { path: string; compiler: string } | undefined {
  for (const compiler of compilers) {
    const r = spawnSync(compiler, ['-std=c11', '-static', '-O2', '-s', '-o', path, source], { encoding: 'utf8' });
    if (r.status === 0) return { path, compiler };
  }
  return undefined;
}

function buildStaticTrue(dir: string): { path: string; compiler: string } {
  const source = join(dir, 'floor-true.c');
  writeFileSync(source, TRUE_SOURCE);
  const built = buildStatic(source, join(dir, 'floor-true'), ['musl-gcc', 'gcc']);
  if (built === undefined) throw new Error('building the exec floor needs musl-gcc or gcc with a static libc');
  return built;
}

async function execFloor(root: string, shim: string, calls: number): Promise<FloorFigures['exec']> {
  const built = buildStaticTrue(root);
  const trivial: Plugin = { binary: built.path, config: {}, env: {} };
  const shimAlone: Plugin = {
    binary: shim,
    env: {},
    config: {
      cniVersion: '1.1.0',
      name: 'floor',
      type: 'plexus-cni',
      socketPath: join(root, 'no-daemon', 'plexus.sock'),
    },
  };
  const a: number[] = [];
  const b: number[] = [];
  for (let i = 0; i < WARMUP + calls; i++) {
    const t = await invoke(trivial, 'VERSION', undefined);
    const s = await invoke(shimAlone, 'VERSION', undefined);
    if (t.exitCode !== 0 || s.exitCode !== 0)
      throw new Error(`exec floor: exit ${t.exitCode} / ${s.exitCode}: ${s.stderr}`);
    if (i < WARMUP) continue;
    a.push(t.ms);
    b.push(s.ms);
  }
  return { staticBinary: summarize(a), shimNoDaemon: summarize(b), compiler: built.compiler };
}

/** Runs the batch in a process of its own: floor-batch.js (Node.js), or the C build of floor-batch.c when given. */
function runBatch(settings: FloorBatchSettings, c?: string): Promise<number[]> {
  const s = settings;
  const [file, args] =
    c !== undefined
      ? [c, [String(s.runs), String(s.warmup), s.prefix, s.bridge, s.net, s.churn ? '1' : '0']]
      : [process.execPath, [join(__dirname, 'floor-batch.js'), JSON.stringify(s)]];
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let errText = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (errText += d));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0)
        return reject(
          new Error(`floor batch (${settings.churn ? 'churn' : 'interleaved'}) exited ${code}: ${errText.trim()}`),
        );
      resolve((JSON.parse(out) as { samples: number[] }).samples);
    });
  });
}

/** Starts floor-daemon.js and waits until it listens; its stop is registered with the tear-down, by PID. */
async function startFloorDaemon(teardown: Teardown, settings: FloorDaemonSettings): Promise<() => void> {
  const child = spawn(process.execPath, [join(__dirname, 'floor-daemon.js'), JSON.stringify(settings)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stop = (): void => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  };
  teardown.add(`stop the floor's Node.js daemon (pid ${child.pid ?? '?'})`, stop);
  let errText = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (errText += d));
  await new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`floor daemon exited ${code}: ${errText.trim()}`)));
    child.stdout.setEncoding('utf8').once('data', () => resolve());
  });
  return stop;
}

/** ADD (timed) and DEL (not) of `runs` pods through bin/plexus-cni against floor-daemon.js, netns made beforehand. */
async function daemonFloor(
  teardown: Teardown,
  root: string,
  shim: string,
  target: { bridge: string; net: string },
  prefix: string,
  runs: number,
): Promise<Summary> {
  const socketPath = join(root, 'floor-daemon', 'plexus.sock');
  mkdirSync(dirname(socketPath), { recursive: true, mode: 0o700 });
  const stop = await startFloorDaemon(teardown, { ...target, socketPath, prefix });
  try {
    const plugin: Plugin = {
      binary: shim,
      env: {},
      config: { cniVersion: '1.1.0', name: 'floor', type: 'plexus-cni', socketPath },
    };
    const names = Array.from({ length: WARMUP + runs }, (_, i) => `${prefix}${i}`);
    const paths = createNetns(teardown, names);
    const samples: number[] = [];
    for (const [i, path] of paths.entries()) {
      const pod = newPod('floor', `pod-${i}`, path);
      const added = await invoke(plugin, 'ADD', pod);
      if (added.exitCode !== 0) throw new Error(`floor daemon ADD: exit ${added.exitCode}: ${added.stdout}`);
      const deleted = await invoke(plugin, 'DEL', pod);
      if (deleted.exitCode !== 0) throw new Error(`floor daemon DEL: exit ${deleted.exitCode}: ${deleted.stdout}`);
      if (i >= WARMUP) samples.push(added.ms);
    }
    return summarize(samples);
  } finally {
    stop();
  }
}

/**
 * Measures the floor: the batch `runs` times in each variant (on a bridge of its own, pods in 10.<net>.0.0/16), then
 * the exec floor `runs` times. Everything it makes is gone when it returns (and registered with the tear-down).
 */
export async function measureFloor(
  teardown: Teardown,
  prefix: string,
  root: string,
  shim: string,
  net: number,
  runs: number,
): Promise<FloorFigures> {
  const bridge = `${prefix}fb`;
  const nsPrefix = `${prefix}-f`;
  const leftovers = (): void => {
    deleteNetns(listNetns(nsPrefix));
    deleteLinkIfPresent(bridge);
  };
  teardown.add(`delete the floor's bridge ${bridge} and namespaces`, leftovers);
  const made = ipBatch([`link add name ${bridge} type bridge`, `link set ${bridge} up`]);
  if (made.status !== 0) throw new Error(`creating ${bridge}: ${made.stderr.trim()}`);
  try {
    const settings = { runs, warmup: WARMUP, bridge, net: `10.${net}` };
    // glibc's static build first: musl has no kernel headers here.
    const c = buildStatic(join(repoRoot(), 'scripts', 'lib', 'bench', 'floor-batch.c'), join(root, 'floor-batch'), [
      'gcc',
      'musl-gcc',
    ]);
    const both = async (binary?: string): Promise<BatchFigures> => ({
      interleaved: summarize(await runBatch({ ...settings, prefix: `${nsPrefix}l`, churn: false }, binary)),
      churn: summarize(await runBatch({ ...settings, prefix: `${nsPrefix}c`, churn: true }, binary)),
    });
    const batchNode = await both();
    const batchC = c !== undefined ? await both(c.path) : undefined;
    const exec = await execFloor(root, shim, runs);
    const nodeDaemon = await daemonFloor(teardown, root, shim, { bridge, net: settings.net }, `${nsPrefix}d`, runs);
    return { batchNode, ...(batchC !== undefined ? { batchC } : {}), exec, nodeDaemon };
  } finally {
    leftovers();
  }
}

/** The floor of each variant, and plexus's ADD medians (section 1, 1c) over it. */
export function floorReport(floor: FloorFigures, addMedian: { interleaved?: number; churn?: number }): FloorReport {
  const exec = floor.exec.staticBinary.median;
  const batch = floor.batchC ?? floor.batchNode;
  const floorMs = { interleaved: round(batch.interleaved.median + exec), churn: round(batch.churn.median + exec) };
  const over = (add: number | undefined, f: number): number | undefined =>
    add === undefined ? undefined : round(add / f);
  const interleaved = over(addMedian.interleaved, floorMs.interleaved);
  const churn = over(addMedian.churn, floorMs.churn);
  return {
    ...floor,
    addMedian,
    floorMs,
    addOverFloor: { ...(interleaved !== undefined ? { interleaved } : {}), ...(churn !== undefined ? { churn } : {}) },
    nodeDaemonOverFloor: round(floor.nodeDaemon.median / floorMs.interleaved),
    ...(addMedian.interleaved !== undefined
      ? { plexusdOwnMs: round(addMedian.interleaved - floor.nodeDaemon.median) }
      : {}),
  };
}

type TableFn = (header: readonly string[], rows: readonly (readonly string[])[]) => string;

/** The floor's table and the ratio lines, as report.ts renders every section. */
export function renderFloor(f: FloorReport, t: TableFn, markdown: boolean): string[] {
  const row = (what: string, s: Summary): string[] => [
    what,
    fmt(s.median, 2),
    fmt(s.p90, 2),
    fmt(s.min, 2),
    fmt(s.max, 2),
  ];
  const li = markdown ? '- ' : '';
  const target = (x: number | undefined): string =>
    x === undefined ? 'n/a' : `${fmt(x, 2)}x (target <= 2x: ${x <= 2 ? 'met' : 'not met'})`;
  return [
    t(
      ['floor', 'median', 'p90', 'min', 'max'],
      [
        ...(f.batchC !== undefined
          ? [
              row('rtnetlink batch of a 1-interface bridge ADD (C), netns made beforehand', f.batchC.interleaved),
              row('the same (C), churn: netns made just before, deleted after', f.batchC.churn),
            ]
          : []),
        row('the same batch through src/kernel (Node.js), netns made beforehand', f.batchNode.interleaved),
        row('the same through src/kernel (Node.js), churn', f.batchNode.churn),
        row(`exec of a static do-nothing binary (${f.exec.compiler} -static)`, f.exec.staticBinary),
        row('exec of bin/plexus-cni VERSION, no daemon (answers locally)', f.exec.shimNoDaemon),
        row('ADD via bin/plexus-cni -> a Node.js daemon that runs only this batch', f.nodeDaemon),
      ],
    ),
    '',
    `${li}floor = batch (${f.batchC !== undefined ? 'C' : 'Node.js'}) + static exec: ${fmt(f.floorMs.interleaved, 2)} ms (interleaved), ${fmt(f.floorMs.churn, 2)} ms (churn)`,
    `${li}plexus 1-interface ADD median / floor, interleaved: ${fmt(f.addMedian.interleaved, 2)} ms = ${target(f.addOverFloor.interleaved)}`,
    `${li}plexus 1-interface ADD median / floor, churn: ${fmt(f.addMedian.churn, 2)} ms = ${target(f.addOverFloor.churn)}`,
    `${li}a Node.js daemon that runs only the batch, through bin/plexus-cni: ${fmt(f.nodeDaemon.median, 2)} ms = ${fmt(f.nodeDaemonOverFloor, 2)}x the floor (interleaved); plexusd's own work on top of it (journal, IPAM, planning, HTTP): ${f.plexusdOwnMs === undefined ? 'n/a' : `${fmt(f.plexusdOwnMs, 2)} ms`}`,
  ];
}
