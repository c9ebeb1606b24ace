/**
 * plexusd's own record of how long its CNI calls took, as the runtime waited for them: the histogram
 * plexus_cni_request_duration_seconds of its /metrics, summed over network types and results for one command, read
 * as the upper bound of the bucket that holds the median and the 90th percentile.
 */
import { get } from 'node:http';

export interface CallDurations {
  readonly command: string;
  readonly calls: number;
  /** Seconds: the `le` of the first bucket holding at least half (p50) and nine tenths (p90) of the calls. */
  readonly p50AtMost: number;
  readonly p90AtMost: number;
}

const BUCKET = /^plexus_cni_request_duration_seconds_bucket\{([^}]*)\} (\d+(?:\.\d+)?)$/;

/** The durations of `command` in a Prometheus text exposition; undefined when it has none. */
export function callDurations(metricsText: string, command: string): CallDurations | undefined {
  const byLe = new Map<number, number>();
  for (const line of metricsText.split('\n')) {
    const m = BUCKET.exec(line);
    if (!m || !m[1]!.includes(`command="${command}"`)) continue;
    const le = /le="([^"]+)"/.exec(m[1]!)?.[1];
    if (le === undefined) continue;
    const bound = le === '+Inf' ? Infinity : Number(le);
    byLe.set(bound, (byLe.get(bound) ?? 0) + Number(m[2]));
  }
  const calls = byLe.get(Infinity) ?? 0;
  if (calls === 0) return undefined;
  const bounds = [...byLe.keys()].sort((a, b) => a - b);
  const atMost = (share: number): number => bounds.find((b) => byLe.get(b)! >= share * calls) ?? Infinity;
  return { command, calls, p50AtMost: atMost(0.5), p90AtMost: atMost(0.9) };
}

/** GET http://address/metrics, as text. */
export function scrapeMetrics(address: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = get(`http://${address}/metrics`, { timeout: 5000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve(text));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer from ${address}/metrics in 5 s`)));
    req.on('error', reject);
  });
}
