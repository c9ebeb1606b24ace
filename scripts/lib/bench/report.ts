/** The report: every figure as data, and its rendering as text or Markdown tables. */
import { existsSync } from 'node:fs';
import { TIME_BINARY } from '../cni';
import type { machine } from '../host';
import { type RunPair, pairTable } from '../pair';
import { fmt, markdownTable, table } from '../stats';
import { type FloorReport, renderFloor } from './floor';
import { type MultiBurstFigures, type MultiLatency } from './multi';
import { type ShimFigures } from './shim-cost';
import { type SoakFigures } from './soak';
import { type BurstFigures, type LatencyFigures } from './single';
import { type DelFigures, renderDel } from './del-report';

// ---------------------------------------------------------------------------------------------

export interface MultiReport {
  readonly variants: { readonly key: string; readonly interfaces: number; readonly networks: string }[];
  readonly latency: MultiLatency;
  /** variant key -> plexus/reference of the medians. */
  readonly ratios: Record<string, { readonly addMedian: number; readonly delMedian: number }>;
  /** (median ADD of the all-native 4-interface variant - median ADD with 1 interface) / 3, per runtime. */
  readonly marginalAddMs: Record<string, number>;
  readonly burst: MultiBurstFigures[];
}

export interface Report {
  readonly machine: ReturnType<typeof machine>;
  /** The Kubernetes / containerd pair of this run and the reference plugins, as the binaries report them. */
  readonly pair: RunPair;
  readonly command: string;
  readonly startedAt: string;
  readonly durationSeconds: number;
  readonly settings: {
    readonly iterations: number;
    readonly warmup: number;
    readonly burst: number;
    readonly concurrency: readonly number[];
    readonly shimCalls: number;
  };
  readonly subjects: { readonly name: string; readonly binary: string; readonly config: unknown }[];
  readonly latency: Record<string, LatencyFigures>;
  readonly ratios: Record<string, { readonly addMedian: number; readonly delMedian: number }>;
  /** Section 1 again as a churn: each ADD right after the same subject's DEL of its previous pod. */
  readonly latencyChurn: Record<string, LatencyFigures>;
  readonly ratiosChurn: Record<string, { readonly addMedian: number; readonly delMedian: number }>;
  readonly shim?: ShimFigures;
  /** Section 0: the rtnetlink and exec floor, and plexus's 1-interface ADD over it. */
  readonly floor?: FloorReport;
  readonly bursts: BurstFigures[];
  readonly multi?: MultiReport;
  readonly soak?: SoakFigures;
  readonly daemon?: { readonly peakRssKiB?: number; readonly exitCode?: number | null };
  readonly del?: DelFigures;
  readonly problems: string[];
}

/** The columns of a latency row, and its cells. */
const LATENCY_COLUMNS = [
  'ADD median',
  'ADD p90',
  'ADD min',
  'ADD max',
  'DEL median',
  'DEL p90',
  'DEL min',
  'DEL max',
  'failures',
];
const latencyCells = (f: LatencyFigures): string[] => [
  ...[f.add, f.del].flatMap((x) => [fmt(x.median), fmt(x.p90), fmt(x.min), fmt(x.max)]),
  String(f.failures.length),
];

export const kib = (x: number | undefined): string => (x === undefined ? 'n/a' : `${(x / 1024).toFixed(1)} MiB`);

export function render(report: Report, markdown: boolean): string {
  const t = markdown ? markdownTable : table;
  const out: string[] = [];
  const head = (s: string): void => void out.push('', markdown ? `### ${s}` : `== ${s}`, '');
  head('Ran on');
  out.push(pairTable(report.pair, t));
  const latencyTable = (title: string, latency: Report['latency'], ratioMap: Report['ratios']): void => {
    head(title);
    out.push(
      t(
        ['subject', ...LATENCY_COLUMNS],
        Object.entries(latency).map(([name, f]) => [name, ...latencyCells(f)]),
      ),
    );
    const ratios = Object.entries(ratioMap);
    if (ratios.length > 0) {
      out.push('');
      for (const [name, r] of ratios)
        out.push(
          `${markdown ? '- ' : ''}${name}: ADD median ${fmt(r.addMedian, 2)}x, DEL median ${fmt(r.delMedian, 2)}x`,
        );
    }
  };
  latencyTable(
    `ADD / DEL latency, 1 interface, ${report.settings.iterations} iterations (ms)`,
    report.latency,
    report.ratios,
  );
  latencyTable(
    `ADD / DEL latency, 1 interface, churn: each ADD right after the same subject's DEL, ${report.settings.iterations} iterations (ms)`,
    report.latencyChurn,
    report.ratiosChurn,
  );
  if (report.floor !== undefined) {
    head('The floor of a 1-interface ADD on this machine (ms)');
    out.push(...renderFloor(report.floor, t, markdown));
  }
  if (report.shim !== undefined) {
    const s = report.shim;
    head(`plexus-cni executable overhead (${report.settings.shimCalls} VERSION calls, ms)`);
    out.push(
      t(
        ['path', 'median', 'p90', 'min', 'max'],
        [
          [
            'VERSION via bin/plexus-cni -> plexusd',
            fmt(s.versionViaShim.median, 2),
            fmt(s.versionViaShim.p90, 2),
            fmt(s.versionViaShim.min, 2),
            fmt(s.versionViaShim.max, 2),
          ],
          [
            'VERSION as in-process HTTP request',
            fmt(s.versionInProcess.median, 2),
            fmt(s.versionInProcess.p90, 2),
            fmt(s.versionInProcess.min, 2),
            fmt(s.versionInProcess.max, 2),
          ],
          [
            'spawn /bin/true (exec floor)',
            fmt(s.execFloor.median, 2),
            fmt(s.execFloor.p90, 2),
            fmt(s.execFloor.min, 2),
            fmt(s.execFloor.max, 2),
          ],
        ],
      ),
    );
    out.push('');
    out.push(
      `${markdown ? '- ' : ''}shim overhead (median via shim - median in-process): ${fmt(s.overheadMedianMs, 2)} ms`,
    );
    out.push(
      `${markdown ? '- ' : ''}peak RSS (${existsSync(TIME_BINARY) ? '/usr/bin/time %M' : 'n/a (install time)'}): plexus-cni VERSION ${kib(s.shimPeakRssKiB.version)}, ADD ${kib(s.shimPeakRssKiB.add)}, DEL ${kib(s.shimPeakRssKiB.del)}` +
        (s.reference !== undefined
          ? `; reference bridge VERSION ${kib(s.reference.version)}, ADD ${kib(s.reference.add)}, DEL ${kib(s.reference.del)}`
          : ''),
    );
    out.push(`${markdown ? '- ' : ''}bin/plexus-cni size: ${(s.shimBinaryBytes / 1024).toFixed(0)} KiB (static)`);
  }
  if (report.bursts.length > 0) {
    head(`Bursts of ${report.settings.burst} pods (ADD all, then DEL all)`);
    out.push(
      t(
        [
          'subject',
          'conc.',
          'ADD wall s',
          'pods/s',
          'ADD p50 ms',
          'ADD p90 ms',
          'DEL wall s',
          'ADD fail',
          'DEL fail',
          'dup IPs',
          'leaks',
        ],
        report.bursts.map((b) => [
          b.subject,
          String(b.concurrency),
          fmt(b.addWallMs / 1000, 2),
          fmt(b.addPodsPerSecond),
          fmt(b.add.median),
          fmt(b.add.p90),
          fmt(b.delWallMs / 1000, 2),
          String(b.addFailures),
          String(b.delFailures),
          String(b.duplicateIps.length),
          String(b.leaks.length),
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
          v.key,
          name,
          ...latencyCells(f),
          m.ratios[v.key] !== undefined && name === 'plexus' ? `${fmt(m.ratios[v.key]?.addMedian, 2)}x` : '',
        ]);
      }
    }
    out.push(t(['ifs', 'runtime', ...LATENCY_COLUMNS, 'ADD ratio'], rows));
    out.push('');
    const li = markdown ? '- ' : '';
    for (const v of m.variants) out.push(`${li}${v.key}: ${v.networks}`);
    for (const v of m.variants) {
      const r = m.ratios[v.key];
      if (r !== undefined)
        out.push(
          `${li}${v.key} interface(s): plexus/reference ADD median ${fmt(r.addMedian, 2)}x, DEL median ${fmt(r.delMedian, 2)}x`,
        );
    }
    const r4 = m.ratios['4'];
    if (r4 !== undefined)
      out.push(
        `${li}4-interface ADD (all run natively by plexus), plexus/reference: ${fmt(r4.addMedian, 2)}x (target <= 0.25x: ${r4.addMedian <= 0.25 ? 'met' : 'not met'})`,
      );
    const r4d = m.ratios['4d'];
    if (r4d !== undefined)
      out.push(
        `${li}4-interface ADD with ptp delegated by plexus (an exec of ptp + host-local, as for the reference), plexus/reference: ${fmt(r4d.addMedian, 2)}x`,
      );
    const marginal = Object.entries(m.marginalAddMs);
    if (marginal.length > 0) {
      out.push(
        `${li}marginal ADD cost per extra interface, from the all-native variant ((median ADD 4 - median ADD 1) / 3): ${marginal.map(([n, x]) => `${n} ${fmt(x, 2)} ms`).join(', ')}`,
      );
    }
    const shared = Object.entries(m.latency.sharedLeaks).filter(([, l]) => l.length > 0);
    out.push(
      `${li}leaks after the latency runs (host links, pod links, bridge ports, leases, journal): ${shared.length === 0 && Object.values(m.latency.figures).every((row) => Object.values(row).every((f) => f.leaks.length === 0)) ? 'none' : 'see problems'}`,
    );
    if (m.burst.length > 0) {
      const b0 = m.burst[0] as MultiBurstFigures;
      head(
        `Burst of ${b0.pods} pods with 3 networks each (bridge + macvlan + bridge2, all native for plexus), concurrency ${b0.concurrency}`,
      );
      out.push(
        t(
          [
            'runtime',
            'ADD wall s',
            'pods/s',
            'ADD p50 ms',
            'ADD p90 ms',
            'DEL wall s',
            'ADD fail',
            'DEL fail',
            'dup IPs',
            'leaks',
          ],
          m.burst.map((b) => [
            b.subject,
            fmt(b.addWallMs / 1000, 2),
            fmt(b.addPodsPerSecond),
            fmt(b.add.median),
            fmt(b.add.p90),
            fmt(b.delWallMs / 1000, 2),
            String(b.addFailures),
            String(b.delFailures),
            String(b.duplicateIps.length),
            String(b.leaks.length),
          ]),
        ),
      );
      const px = m.burst.find((b) => b.daemonPeakRssKiB !== undefined);
      if (px !== undefined)
        out.push(
          '',
          `${li}plexusd peak RSS during this burst (VmHWM reset just before it): ${kib(px.daemonPeakRssKiB)}`,
        );
    }
  }
  const soak = report.soak;
  if (soak !== undefined) {
    head(`Soak: ${soak.cycles} ADD/DEL cycles of 2-network pods (${soak.networks}), ${soak.concurrency} at a time`);
    out.push(
      t(
        ['cycles', 'plexusd RSS', 'open fds', 'failed cycles', 'cycles/s'],
        soak.segments.map((s) => [
          String(s.cycles),
          kib(s.rssKiB),
          s.fds === undefined ? 'n/a' : String(s.fds),
          String(s.failures),
          s.cycles === 0 ? '-' : fmt(s.cyclesPerSecond),
        ]),
      ),
    );
    out.push(
      '',
      `${markdown ? '- ' : ''}leaks after the soak (leases, journal records, bridge ports): ${soak.leaks.length === 0 ? 'none' : soak.leaks.length}`,
    );
  }
  out.push(...renderDel(report, markdown));
  return out.join('\n');
}
