/** The DEL lines of the report: the targets of issue 24 (DEL off the critical path) and the checks that bound it. */
import { fmt } from '../stats';
import type { OverlapFigures } from './del-overlap';

export interface DelFigures {
  /** The address-on-two-interfaces sampler over every bench netns, for the whole run. */
  readonly overlap?: OverlapFigures;
  /** How long each leak check waited for plexusd's background teardown (ms). */
  readonly teardownWaitsMs: readonly number[];
}

const TARGET_1 = 0.25;
const TARGET_4 = 0.2;

const verdict = (x: number | undefined, target: number): string =>
  x === undefined ? 'n/a' : `${fmt(x, 2)}x (target <= ${target}x: ${x <= target ? 'met' : 'not met'})`;

/** The parts of the bench's report the DEL section reads (report.ts's Report has them). */
export interface DelReportInput {
  readonly del?: DelFigures;
  readonly ratios: Readonly<Record<string, { readonly delMedian?: number } | undefined>>;
  readonly ratiosChurn: Readonly<Record<string, { readonly delMedian?: number } | undefined>>;
  readonly multi?: { readonly ratios: Readonly<Record<string, { readonly delMedian?: number } | undefined>> };
}

export function renderDel(report: DelReportInput, markdown: boolean): string[] {
  const d = report.del;
  if (d === undefined) return [];
  const li = markdown ? '- ' : '';
  const out = ['', markdown ? '### DEL off the critical path' : '== DEL off the critical path', ''];
  out.push(
    `${li}1-interface DEL median, plexus/reference bridge: ${verdict(report.ratios['plexus/reference']?.delMedian, TARGET_1)}`,
  );
  out.push(
    `${li}1-interface DEL median in churn, plexus/reference bridge: ${verdict(report.ratiosChurn['plexus/reference']?.delMedian, TARGET_1)}`,
  );
  out.push(
    `${li}4-interface DEL median, plexus/reference runtime: ${verdict(report.multi?.ratios['4']?.delMedian, TARGET_4)}`,
  );
  const waits = d.teardownWaitsMs;
  if (waits.length > 0) {
    out.push(
      `${li}background teardown finished at most ${Math.max(...waits)} ms after a section's last DEL (${waits.length} leak checks, each after it)`,
    );
  }
  const o = d.overlap;
  if (o !== undefined) {
    out.push(
      `${li}an address on two interfaces: ${o.overlaps} in ${o.samples} samples of every bench netns (up to ${o.mostNetns} at once)`,
    );
    for (const e of o.examples) out.push(`${li}  ${e}`);
  }
  return out;
}
