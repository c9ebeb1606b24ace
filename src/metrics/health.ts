import { errorMessage } from '../common/error-message';
/**
 * What the DaemonSet's probes ask (through --metrics-address): liveness is the daemon's own health, readiness adds
 * what it needs from outside. The model is kuryr's health server: readiness checks the dependencies, liveness the
 * daemon itself, including a memory ceiling.
 *
 * - live: the kernel worker answers a cheap call (a worker stuck in a syscall would leave every CNI call hanging)
 *   and the resident memory is under --memory-ceiling-mib (a leak ends in a restart with a drain, not an OOM kill
 *   in the middle of a transaction).
 * - journal (live, when given): a record can be written in the journal directory (not a full or read-only disk, not
 *   a directory removed underneath: the check makes it again). A daemon that cannot write its journal fails every ADD.
 * - ready: live, recovery done and the API caches synced (plexusd's own readiness), and nothing an operator must fix
 *   outside the daemon stops it from serving (a permission RBAC refuses it); such problems that do not stop serving
 *   are listed under `warnings` without failing readiness.
 */

/** A problem outside the daemon that an operator must fix (a permission RBAC refuses), named by its check. */
export interface ExternalProblem {
  readonly check: string;
  readonly problem: string;
  /** Serving depends on it: readiness fails while it lasts. */
  readonly blocksServing: boolean;
}

export interface HealthChecks {
  /** Resolves when the kernel worker has answered a call; rejects or times out otherwise. */
  readonly kernelAnswers: () => Promise<unknown>;
  readonly ready: () => boolean;
  /** What is wrong outside the daemon now. */
  readonly problems?: () => readonly ExternalProblem[];
  readonly memoryCeilingBytes?: number;
  /** How long the kernel worker may take (a burst queues calls ahead of the probe's). Default 10 s. */
  readonly kernelTimeoutMs?: number;
  readonly rss?: () => number;
  /** Undefined when a journal record can be written now, else why not. */
  readonly journalWritable?: () => Promise<string | undefined>;
}

export interface HealthReport {
  readonly ok: boolean;
  readonly checks: Readonly<Record<string, string>>;
  /** Problems that do not stop serving but want an operator (readiness only). */
  readonly warnings?: Readonly<Record<string, string>>;
}

export class DaemonHealth {
  private lastKernel: { at: number; result: Promise<string | undefined> } | undefined;
  private lastJournal: { at: number; result: Promise<string | undefined> } | undefined;

  constructor(private readonly checks: HealthChecks) {}

  /** The kernel worker's answer (undefined: fine; else why not), at most one probe call per second. */
  private kernel(): Promise<string | undefined> {
    const now = Date.now();
    if (this.lastKernel && now - this.lastKernel.at < 1000) return this.lastKernel.result;
    const timeoutMs = this.checks.kernelTimeoutMs ?? 10000;
    let timer: NodeJS.Timeout | undefined;
    const result = Promise.race([
      this.checks.kernelAnswers().then(
        () => undefined,
        (e: unknown) => `the kernel worker failed: ${errorMessage(e)}`,
      ),
      new Promise<string>(
        (resolve) =>
          (timer = setTimeout(() => resolve(`the kernel worker has not answered for ${timeoutMs} ms`), timeoutMs)),
      ),
    ]).finally(() => clearTimeout(timer));
    this.lastKernel = { at: now, result };
    return result;
  }

  /** The journal's writability, asked at most once per second. */
  private journal(writable: () => Promise<string | undefined>): Promise<string | undefined> {
    const now = Date.now();
    if (!this.lastJournal || now - this.lastJournal.at >= 1000) {
      const result = writable().catch((e: unknown) => `the journal check failed: ${errorMessage(e)}`);
      this.lastJournal = { at: now, result };
    }
    return this.lastJournal.result;
  }

  async live(): Promise<HealthReport> {
    const checks: Record<string, string> = {};
    const kernel = await this.kernel();
    checks.kernel = kernel ?? 'ok';
    if (this.checks.journalWritable) checks.journal = (await this.journal(this.checks.journalWritable)) ?? 'ok';
    const ceiling = this.checks.memoryCeilingBytes;
    if (ceiling !== undefined) {
      const rss = (this.checks.rss ?? (() => process.memoryUsage.rss()))();
      checks.memory =
        rss <= ceiling
          ? 'ok'
          : `resident memory ${(rss / 1048576).toFixed(0)} MiB is over the ceiling of ${(ceiling / 1048576).toFixed(0)} MiB`;
    }
    return { ok: Object.values(checks).every((c) => c === 'ok'), checks };
  }

  async ready(): Promise<HealthReport> {
    const live = await this.live();
    const checks: Record<string, string> = {
      ...live.checks,
      started: this.checks.ready() ? 'ok' : 'recovering the journal or syncing the API caches',
    };
    const warnings: Record<string, string> = {};
    for (const p of this.checks.problems?.() ?? []) {
      const into = p.blocksServing ? checks : warnings;
      into[p.check] = into[p.check] ? `${into[p.check]}; ${p.problem}` : p.problem;
    }
    const ok = Object.values(checks).every((c) => c === 'ok');
    return { ok, checks, ...(Object.keys(warnings).length ? { warnings } : {}) };
  }
}
