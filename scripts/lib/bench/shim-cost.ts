/** What the executable itself costs (section 2): VERSION through the shim against the same request in-process, exec floor, peak RSS. */
import { spawn } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { TIME_BINARY, describeFailure, hostSideLinksOf, invoke, newPod, parseAdd } from '../cni';
import { createNetns, deleteNetns } from '../host';
import { type Plexusd, httpOverSocket, shimBinary } from '../plexusd';
import { type Summary, round, summarize } from '../stats';
import { type Subject } from '../subject';
import { type Teardown } from '../teardown';
import { WARMUP, hostLinksCreated } from './single';

// ---------------------------------------------------------------------------------------------
// 2. What the executable itself costs: VERSION through the shim vs the same request in-process

export interface ShimFigures {
  readonly versionViaShim: Summary;
  readonly versionInProcess: Summary;
  readonly execFloor: Summary;
  readonly overheadMedianMs: number;
  readonly shimPeakRssKiB: { readonly version?: number; readonly add?: number; readonly del?: number };
  readonly shimBinaryBytes: number;
  readonly reference?: { readonly version?: number; readonly add?: number; readonly del?: number };
}

export async function execTrue(): Promise<number> {
  const t0 = process.hrtime.bigint();
  await new Promise<void>((resolve, reject) =>
    spawn('/bin/true', [], { stdio: 'ignore' })
      .on('error', reject)
      .on('close', () => resolve()),
  );
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

/** Max of a few /usr/bin/time -f %M readings for VERSION, ADD and DEL of one plugin. */
export async function peakRss(
  teardown: Teardown,
  prefix: string,
  subject: Subject,
  samples: number,
): Promise<{ version?: number; add?: number; del?: number }> {
  if (!existsSync(TIME_BINARY)) return {};
  const names = Array.from({ length: samples }, (_, i) => `${prefix}-${subject.tag}-m${i}`);
  createNetns(teardown, names);
  const max = (xs: (number | undefined)[]): number | undefined =>
    xs.some((x) => x !== undefined) ? Math.max(...xs.filter((x): x is number => x !== undefined)) : undefined;
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
      const d = await invoke(subject.plugin, 'DEL', pod, {
        measureRss: true,
        ...(parsed.ok ? { prevResult: parsed.result } : {}),
      });
      if (d.exitCode === 0) del.push(d.maxRssKiB);
    }
  } finally {
    deleteNetns(names);
  }
  const out: { version?: number; add?: number; del?: number } = {};
  const v = max(version),
    a = max(add),
    d = max(del);
  if (v !== undefined) out.version = v;
  if (a !== undefined) out.add = a;
  if (d !== undefined) out.del = d;
  return out;
}

export async function measureShim(
  teardown: Teardown,
  prefix: string,
  plexus: Subject,
  daemon: Plexusd,
  reference: Subject | undefined,
  calls: number,
): Promise<ShimFigures> {
  const config = JSON.stringify(plexus.plugin.config);
  const body = JSON.stringify({
    env: { CNI_COMMAND: 'VERSION', CNI_PATH: plexus.plugin.env['CNI_PATH'] ?? '' },
    stdin: config,
  });
  const check = await httpOverSocket(daemon.socket, 'POST', '/v1/cni', body);
  if (check.status !== 200 || check.headers['x-cni-exit-code'] !== '0')
    throw new Error(`in-process VERSION: HTTP ${check.status}: ${check.body}`);
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
