/**
 * plexusd's Prometheus metrics (prom-client), on the socket's /metrics and, with --metrics-address, over TCP.
 * Nothing here is on a CNI call's path: a call is timed by the server (CniCallObserver), and what it attached is read
 * from the journal after the reply has gone; the gauges are read from the journal when scraped.
 *
 *   plexus_cni_request_duration_seconds{command,network_type,result}  CNI calls as plexusd handled them
 *   plexus_cni_errors_total{command,code}                              calls answered with a CNI error, by code
 *   plexus_attachments{network}                                        pod interfaces attached now, by network
 *   plexus_journal_records / plexus_journal_bytes                      the journal (one record per sandbox)
 *   plexus_api_write_retries_total                                     network-status and event writes retried
 *   plexus_api_forbidden_total{verb,resource}                          API requests RBAC refused (HTTP 403)
 *   plexus_cni_calls_in_flight / plexus_cni_calls_queued               the server's concurrency limit
 *   plexus_teardowns_pending{state}                                    DELs answered whose links and leases are still to go
 *   plexus_teardown_oldest_seconds                                     how long the oldest of them has waited
 *   plexus_teardown_failures_total                                     background teardown attempts that failed (retried)
 *   process_*, nodejs_*                                                prom-client's default process metrics
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { AttachmentRecord } from '../engine/journal';
import type { TeardownStats } from '../engine/teardown/queue';

/** What the metrics read from the daemon: the engine's journal records, and the server's queue. */
export interface MetricsSources {
  records(): Promise<AttachmentRecord[]>;
  /** One attachment's record (a stat and one small read), undefined when there is none. */
  recordOf(containerId: string, ifname: string): Promise<AttachmentRecord | undefined>;
  readonly journalDir: string;
  readonly calls?: () => { readonly inFlight: number; readonly queued: number };
  /** The background teardown, when DELs answer before the links are gone. */
  readonly teardowns?: () => TeardownStats | undefined;
  /** Background API writes retried so far (status and events), when plexusd talks to an API. */
  readonly apiWriteRetries?: () => number;
  /** API requests refused with 403 so far, by verb and resource, when plexusd talks to an API. */
  readonly apiForbidden?: () => readonly { readonly verb: string; readonly resource: string; readonly count: number }[];
}

/** One CNI call as the server answered it. */
export interface ObservedCall {
  readonly command: string;
  readonly containerId: string | undefined;
  /** CNI_IFNAME, when the call had one. */
  readonly ifname?: string | undefined;
  /** 0 for success; else the CNI error code of the reply. */
  readonly code: number;
  readonly seconds: number;
}

/** Told of every CNI call once it has been answered. */
export interface CniCallObserver {
  observe(call: ObservedCall): void;
}

/** The network types a record's attachments were made by, as one label value: "bridge", "bridge+macvlan". */
const typesOf = (record: AttachmentRecord): string => {
  const types = [...new Set((record.details?.attachments ?? []).map((a) => a.driver))].sort();
  return types.length ? types.join('+') : 'unknown';
};

/** A counter that follows a running total kept elsewhere, read when scraped. */
function totalCounter(registers: Registry[], name: string, help: string, total: () => number): void {
  let seen = 0;
  new Counter({
    name,
    help,
    registers,
    collect() {
      const now = total();
      if (now > seen) this.inc(now - seen);
      seen = now;
    },
  });
}

/** Latency buckets from 1 ms (a cached CHECK) to 30 s (a delegated plugin timing out). */
const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

export class DaemonMetrics implements CniCallObserver {
  readonly registry = new Registry();
  private readonly duration: Histogram<'command' | 'network_type' | 'result'>;
  private readonly errors: Counter<'command' | 'code'>;
  /** Each sandbox's network types, for labelling its DEL and CHECK (its ADD reads them from the journal). */
  private readonly typesByContainer = new Map<string, string>();

  constructor(private readonly sources: MetricsSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.duration = new Histogram({
      name: 'plexus_cni_request_duration_seconds',
      help: 'CNI calls handled by plexusd, from the request to the reply, by command, network types of the sandbox and result',
      labelNames: ['command', 'network_type', 'result'],
      buckets: BUCKETS,
      registers,
    });
    this.errors = new Counter({
      name: 'plexus_cni_errors_total',
      help: 'CNI calls answered with an error, by command and CNI error code',
      labelNames: ['command', 'code'],
      registers,
    });
    const typesByContainer = this.typesByContainer;
    new Gauge({
      name: 'plexus_attachments',
      help: 'Pod interfaces attached on this node, by network (namespace/name)',
      labelNames: ['network'],
      registers,
      async collect() {
        const records = await sources.records();
        this.reset();
        for (const r of records) {
          typesByContainer.set(r.meta.containerId, typesOf(r));
          for (const a of r.details?.attachments ?? []) this.inc({ network: a.network });
        }
      },
    });
    const journalFiles = async (): Promise<{ count: number; bytes: number }> => {
      const names = (await readdir(sources.journalDir).catch(() => [] as string[])).filter((n) => n.endsWith('.jsonl'));
      const sizes = await Promise.all(
        names.map((n) =>
          stat(join(sources.journalDir, n)).then(
            (s) => s.size,
            () => 0,
          ),
        ),
      );
      return { count: names.length, bytes: sizes.reduce((a, b) => a + b, 0) };
    };
    new Gauge({
      name: 'plexus_journal_records',
      help: 'Records in the journal (one per sandbox and runtime interface)',
      registers,
      async collect() {
        this.set((await journalFiles()).count);
      },
    });
    new Gauge({
      name: 'plexus_journal_bytes',
      help: "Bytes of the journal's record files",
      registers,
      async collect() {
        this.set((await journalFiles()).bytes);
      },
    });
    totalCounter(
      registers,
      'plexus_api_write_retries_total',
      'Background writes to the Kubernetes API (network-status, events) retried after a failure',
      () => sources.apiWriteRetries?.() ?? 0,
    );
    const forbiddenSeen = new Map<string, number>();
    new Counter({
      name: 'plexus_api_forbidden_total',
      help: 'Kubernetes API requests refused by RBAC (HTTP 403), by verb and resource; each names a permission plexusd lacks',
      labelNames: ['verb', 'resource'],
      registers,
      collect() {
        for (const { verb, resource, count } of sources.apiForbidden?.() ?? []) {
          const key = `${verb} ${resource}`;
          const seen = forbiddenSeen.get(key) ?? 0;
          if (count > seen) this.inc({ verb, resource }, count - seen);
          forbiddenSeen.set(key, count);
        }
      },
    });
    if (sources.calls) {
      const calls = sources.calls;
      new Gauge({
        name: 'plexus_cni_calls_in_flight',
        help: 'CNI calls being handled',
        registers,
        collect() {
          this.set(calls().inFlight);
        },
      });
      new Gauge({
        name: 'plexus_cni_calls_queued',
        help: 'CNI calls waiting for a slot (--max-concurrent)',
        registers,
        collect() {
          this.set(calls().queued);
        },
      });
    }
    if (sources.teardowns) this.teardownMetrics(sources.teardowns, registers);
  }

  /** What an operator alerts on when DELs answer before the kernel is done: teardowns that pile up, age or fail. */
  private teardownMetrics(teardowns: () => TeardownStats | undefined, registers: Registry[]): void {
    new Gauge({
      name: 'plexus_teardowns_pending',
      help: 'Attachments whose DEL was answered and whose links and leases are still to go, by state (queued, running, retrying)',
      labelNames: ['state'],
      registers,
      collect() {
        const now = teardowns();
        for (const state of ['queued', 'running', 'retrying'] as const) this.set({ state }, now?.[state] ?? 0);
      },
    });
    new Gauge({
      name: 'plexus_teardown_oldest_seconds',
      help: 'How long the oldest pending background teardown has waited since its DEL was answered (0 when none)',
      registers,
      collect() {
        this.set(teardowns()?.oldestSeconds ?? 0);
      },
    });
    totalCounter(
      registers,
      'plexus_teardown_failures_total',
      'Background teardown attempts that failed; the record keeps its leases and the teardown is retried',
      () => teardowns()?.failedAttempts ?? 0,
    );
  }

  observe(call: ObservedCall): void {
    const result = call.code === 0 ? 'ok' : 'error';
    if (call.code !== 0) this.errors.inc({ command: call.command, code: String(call.code) });
    const cid = call.containerId;
    if (call.command === 'ADD' && call.code === 0 && cid && call.ifname) {
      // After the reply: the record this ADD made names its network types (one file, not a listing of the journal).
      void this.sources.recordOf(cid, call.ifname).then(
        (record) => {
          const earlier = this.typesByContainer.get(cid)?.split('+') ?? []; // the sandbox's other runtime interfaces
          const mine = record ? typesOf(record).split('+') : [];
          const all = [...new Set([...earlier, ...mine])].filter((t) => t !== 'unknown').sort();
          const types = all.length ? all.join('+') : 'unknown';
          this.typesByContainer.set(cid, types);
          this.duration.observe({ command: call.command, network_type: types, result }, call.seconds);
        },
        () => this.duration.observe({ command: call.command, network_type: 'unknown', result }, call.seconds),
      );
      return;
    }
    const types = (cid && this.typesByContainer.get(cid)) || 'unknown';
    if (call.command === 'DEL' && cid && call.code === 0) this.typesByContainer.delete(cid);
    this.duration.observe({ command: call.command, network_type: types, result }, call.seconds);
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  render(): Promise<string> {
    return this.registry.metrics();
  }
}
