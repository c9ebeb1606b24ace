/**
 * What the API server was asked: its counter apiserver_request_total from its /metrics (Prometheus text), by verb,
 * group, resource and subresource, read before and after a run to count the writes the run made.
 */
import type { KubeApiFixture } from '../../../test/support/k8s';

export interface RequestCount {
  /** As the API server labels it: GET, LIST, WATCH, POST, PUT, PATCH, DELETE, APPLY... */
  readonly verb: string;
  /** "" for the core group. */
  readonly group: string;
  readonly resource: string;
  readonly subresource: string;
  readonly count: number;
}

/** Which requests to count; a field left out matches any value. */
export interface RequestMatch {
  readonly group?: string;
  readonly resource?: string;
  readonly subresource?: string;
}

const WRITE_VERBS: readonly string[] = ['POST', 'PUT', 'PATCH', 'DELETE', 'DELETECOLLECTION', 'APPLY'];
const SAMPLE = /^apiserver_request_total\{([^}]*)\} ([0-9.eE+-]+)$/;
const LABEL = /(\w+)="((?:[^"\\]|\\.)*)"/g;

/** Every sample of apiserver_request_total in a /metrics text (codes and scopes summed over). */
export function requestCounts(metricsText: string): RequestCount[] {
  const byKey = new Map<string, RequestCount>();
  for (const line of metricsText.split('\n')) {
    const m = SAMPLE.exec(line.trim());
    if (!m) continue;
    const labels = new Map([...m[1]!.matchAll(LABEL)].map((l) => [l[1]!, l[2]!]));
    const key = ['verb', 'group', 'resource', 'subresource'].map((k) => labels.get(k) ?? '');
    const [verb, group, resource, subresource] = key as [string, string, string, string];
    const had = byKey.get(key.join('\0'))?.count ?? 0;
    byKey.set(key.join('\0'), { verb, group, resource, subresource, count: had + Number(m[2]) });
  }
  return [...byKey.values()];
}

const matches = (c: RequestCount, match: RequestMatch): boolean =>
  (match.group === undefined || c.group === match.group) &&
  (match.resource === undefined || c.resource === match.resource) &&
  (match.subresource === undefined || c.subresource === match.subresource);

/** Write requests (create, update, patch, delete) that match, between two readings of the counter. */
export function writesBetween(
  before: readonly RequestCount[],
  after: readonly RequestCount[],
  match: RequestMatch = {},
): number {
  const sum = (counts: readonly RequestCount[]): number =>
    counts.filter((c) => WRITE_VERBS.includes(c.verb) && matches(c, match)).reduce((n, c) => n + c.count, 0);
  return sum(after) - sum(before);
}

/** Write requests between two readings by resource (`group/resource[/subresource]`), the busiest first. */
export function writesByResource(before: readonly RequestCount[], after: readonly RequestCount[]): [string, number][] {
  const by = new Map<string, number>();
  const add = (counts: readonly RequestCount[], sign: number): void => {
    for (const c of counts.filter((x) => WRITE_VERBS.includes(x.verb))) {
      const name = [c.group || 'core', c.resource, ...(c.subresource ? [c.subresource] : [])].join('/');
      by.set(name, (by.get(name) ?? 0) + sign * c.count);
    }
  };
  add(after, 1);
  add(before, -1);
  return [...by].filter(([, n]) => n > 0).sort((x, y) => y[1] - x[1]);
}

/** The API server's counter now, read as the admin. */
export async function apiRequestCounts(api: KubeApiFixture): Promise<RequestCount[]> {
  const r = await api.request('GET', '/metrics');
  if (r.status !== 200 || typeof r.body !== 'string') throw new Error(`GET /metrics of the API server: ${r.status}`);
  return requestCounts(r.body);
}
