/**
 * Permissions the API server refuses plexusd (HTTP 403). A refusal does not go away by itself, so it is reported in
 * one place for every caller, at once and loudly: an error log line naming the verb and resource (repeated at most
 * once a minute while it lasts), a count per verb and resource (plexus_api_forbidden_total), and, where a refused
 * request is one serving depends on (a cache plexusd answers from, a request a CNI call waits for), on /readyz. An
 * answer other than 403 to the same verb and resource ends the refusal (RBAC was fixed).
 */
import type { Logger } from 'pino';
import type { PermissionObserver, RefusedRequest } from './api-client';
import type { RequestAttributes } from './request-attributes';
import { definedFields } from '../common/defined-fields';

/** A refused permission as readiness shows it. */
export interface RefusedPermissions {
  readonly check: string;
  readonly problem: string;
  readonly blocksServing: boolean;
}

/** Refusals of one verb and resource, counted since the process started. */
export interface RefusalCount {
  readonly verb: string;
  readonly resource: string;
  readonly count: number;
}

interface Refusal {
  readonly verb: string;
  readonly resource: string;
  blocksServing: boolean;
  /** Refusals since the last log line about it. */
  unlogged: number;
  loggedAt: number;
}

const keyOf = (r: RequestAttributes): string => `${r.verb} ${r.resource}`;
const HOW_TO_FIX =
  'plexusd\'s ClusterRole lacks it: apply deploy/10-rbac.yaml of this version (docs/kubernetes.md, "RBAC")';

export class RbacRefusals implements PermissionObserver {
  /** Refused now (no answer but 403 since). */
  private readonly current = new Map<string, Refusal>();
  private readonly counts = new Map<string, { verb: string; resource: string; count: number }>();

  constructor(
    private readonly log: Logger,
    /** How often a lasting refusal is logged again. */
    private readonly repeatMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  refused(request: RefusedRequest): void {
    const key = keyOf(request);
    const counted = this.counts.get(key) ?? { verb: request.verb, resource: request.resource, count: 0 };
    counted.count += 1;
    this.counts.set(key, counted);
    const known = this.current.get(key);
    const now = this.now();
    if (known) {
      known.blocksServing ||= request.blocksServing;
      known.unlogged += 1;
      if (now - known.loggedAt < this.repeatMs) return;
    }
    const refusal = known ?? {
      verb: request.verb,
      resource: request.resource,
      blocksServing: request.blocksServing,
      unlogged: 1,
      loggedAt: now,
    };
    this.current.set(key, refusal);
    this.log.error(
      {
        verb: request.verb,
        resource: request.resource,
        ...definedFields({ namespace: request.namespace || undefined }),
        path: request.path,
        blocksServing: refusal.blocksServing,
        refusals: refusal.unlogged,
        err: request.message,
      },
      `the Kubernetes API refuses plexusd "${key}" (HTTP 403 Forbidden); ${HOW_TO_FIX}`,
    );
    refusal.unlogged = 0;
    refusal.loggedAt = now;
  }

  allowed(request: RequestAttributes): void {
    if (this.current.size === 0) return;
    const key = keyOf(request);
    if (!this.current.delete(key)) return;
    this.log.info(
      { verb: request.verb, resource: request.resource },
      `the Kubernetes API allows plexusd "${key}" again`,
    );
  }

  /** Every refusal so far, by verb and resource (for the counter). */
  totals(): readonly RefusalCount[] {
    return [...this.counts.values()];
  }

  /** What readiness shows: the permissions refused now, those serving depends on apart from the others. */
  problems(): readonly RefusedPermissions[] {
    const refused = [...this.current.values()];
    const list = (blocking: boolean): string =>
      refused
        .filter((r) => r.blocksServing === blocking)
        .map((r) => `${r.verb} ${r.resource}`)
        .sort()
        .join(', ');
    const problems: RefusedPermissions[] = [];
    const blocking = list(true);
    if (blocking)
      problems.push({
        check: 'rbac',
        problem: `the API refuses ${blocking}: plexusd cannot serve; ${HOW_TO_FIX}`,
        blocksServing: true,
      });
    const other = list(false);
    if (other)
      problems.push({ check: 'rbac', problem: `the API refuses ${other}; ${HOW_TO_FIX}`, blocksServing: false });
    return problems;
  }
}
