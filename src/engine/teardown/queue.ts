/**
 * The background teardown: attachments whose DEL has been answered and whose links are still to go. Deleting a link
 * waits for the kernel's RCU grace periods (about 20 ms); a runtime waits for its DEL inside StopPodSandbox, so that
 * wait is taken here instead, after the answer, for every pending attachment at once: the jobs of a batch delete
 * their links side by side, so the batch waits about once. A job's leases are released only when every link of the
 * job is gone (no address is ever on two live interfaces), then its record is closed. The record says `deleting`
 * from before the DEL answered, so a crash at any point is finished by the next start's recovery.
 */
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { CniCode, CniError, type Result, err, ok, toCniError } from '../../cni/errors';
import type { UndoStep } from '../../drivers/driver';
import { describeUndo, undoStages } from '../../drivers/undo';
import type { AttachmentRecord } from '../journal/record';
import { errorMessage } from '../../common/error-message';

export interface TeardownJob {
  /** The record being torn down (it says `deleting`). */
  readonly record: AttachmentRecord;
  /** The steps left to undo (splitTeardown's `later`), in recorded order. */
  readonly steps: readonly UndoStep[];
  /** Called once the job leaves the queue, done or handed back (e.g. to let go of a pinned netns). */
  readonly release?: () => void;
}

export type TeardownOutcome = Result<void, CniError>;

/** What an operator watches of the background teardown (the metrics read it when scraped). */
export interface TeardownStats {
  /** Teardowns waiting for their batch. */
  readonly queued: number;
  /** Teardowns whose links or leases are being removed now. */
  readonly running: number;
  /** Teardowns that failed and wait to be tried again (their records keep their leases). */
  readonly retrying: number;
  /** How long the oldest pending teardown has waited since its DEL was answered, in seconds (0 when none). */
  readonly oldestSeconds: number;
  /** Attempts that failed, since the start. */
  readonly failedAttempts: number;
}

export interface TeardownDeps {
  /** Undoes one step; each tolerates what is already gone. */
  runStep(step: UndoStep): Promise<Result<void, CniError>>;
  /** Every step of the job is undone: closes its record. */
  finish(job: TeardownJob): Promise<void>;
  readonly log: Logger;
  /** Waited for before each batch (a test holds the background with it); default none. */
  hold?(): Promise<void>;
  /** Delay before a failed job is tried again, doubled per attempt up to `max` (ms). */
  readonly retryMs?: { readonly first: number; readonly max: number };
}

/** Jobs taken in one batch: their link deletions all run at once. */
const MAX_BATCH = 256;
const DEFAULT_RETRY = { first: 1000, max: 60_000 };

interface Pending {
  readonly key: string;
  readonly job: TeardownJob;
  state: 'queued' | 'running' | 'waiting';
  /** When the job was queued (performance.now()). */
  readonly since: number;
  attempts: number;
  /** Callers waiting for the next attempt's outcome; with `handBack`, a failed job is theirs to undo. */
  readonly waiters: { readonly resolve: (outcome: TeardownOutcome) => void; readonly handBack: boolean }[];
  retry?: NodeJS.Timeout;
}

const keyOf = (containerId: string, ifname: string): string => `${containerId}\u0000${ifname}`;

const teardownFailed = (record: AttachmentRecord, failures: readonly string[]): CniError =>
  new CniError(
    CniCode.Internal,
    `the background teardown of ${record.meta.containerId}/${record.meta.ifname} ` +
      `could not undo ${failures.length} step(s): ${failures.join('; ')}`,
    'its record stays (deleting) and keeps its leases; the teardown is retried, and the next start of plexusd finishes it',
  );

export class TeardownQueue {
  private readonly pending = new Map<string, Pending>();
  private readonly ready: string[] = [];
  private pumping = false;
  private closed = false;
  private readonly idle: (() => void)[] = [];
  private failedAttempts = 0;

  constructor(private readonly deps: TeardownDeps) {}

  /** How many attachments are being torn down. */
  get size(): number {
    return this.pending.size;
  }

  stats(now = performance.now()): TeardownStats {
    const count = { queued: 0, running: 0, waiting: 0 };
    let oldest = now;
    for (const entry of this.pending.values()) {
      count[entry.state]++;
      oldest = Math.min(oldest, entry.since);
    }
    const { queued, running, waiting: retrying } = count;
    return { queued, running, retrying, oldestSeconds: (now - oldest) / 1000, failedAttempts: this.failedAttempts };
  }

  /** Whether the attachment is being torn down. */
  has(containerId: string, ifname: string): boolean {
    return this.pending.has(keyOf(containerId, ifname));
  }

  /** Queues a record's teardown; false when it is queued already (a repeated DEL) or the queue is closed. */
  add(job: TeardownJob): boolean {
    const key = keyOf(job.record.meta.containerId, job.record.meta.ifname);
    if (this.closed || this.pending.has(key)) return false;
    this.pending.set(key, { key, job, state: 'queued', since: performance.now(), attempts: 0, waiters: [] });
    this.ready.push(key);
    this.kick();
    return true;
  }

  /**
   * Waits for the attachment's teardown (tried at once if it was waiting to be retried): undefined when none is
   * pending, else its outcome. A failed one is handed back (no longer queued): the caller undoes the record itself.
   */
  settle(containerId: string, ifname: string): Promise<TeardownOutcome | undefined> {
    const entry = this.pending.get(keyOf(containerId, ifname));
    if (!entry) return Promise.resolve(undefined);
    return this.nextOutcome(entry, true);
  }

  /**
   * Waits for the next attempt of every pending teardown in `netns` (a runtime that puts a new sandbox's interfaces
   * in a netns it keeps must find the old ones gone). A failed one stays queued, retried.
   */
  async settleNetns(netns: string): Promise<void> {
    const inNetns = [...this.pending.values()].filter((e) => e.job.record.meta.netns === netns);
    await Promise.all(inNetns.map((e) => this.nextOutcome(e, false)));
  }

  private nextOutcome(entry: Pending, handBack: boolean): Promise<TeardownOutcome> {
    if (entry.state === 'waiting') this.requeue(entry);
    return new Promise((resolve) => entry.waiters.push({ resolve, handBack }));
  }

  /**
   * For a stopping daemon: tries every pending teardown (a failed one once more at once) and waits until none is
   * left or `timeoutMs` has passed; then schedules no more retries. Answers how many were left: their records say
   * `deleting`, and the next start finishes them.
   */
  async drain(timeoutMs: number): Promise<number> {
    for (const entry of this.pending.values()) if (entry.state === 'waiting') this.requeue(entry);
    if (this.pending.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => this.idle.push(resolve)),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs))),
      ]);
      clearTimeout(timer);
    }
    this.closed = true;
    for (const entry of this.pending.values()) clearTimeout(entry.retry);
    return this.pending.size;
  }

  private requeue(entry: Pending): void {
    clearTimeout(entry.retry);
    entry.retry = undefined;
    entry.state = 'queued';
    this.ready.push(entry.key);
    this.kick();
  }

  private kick(): void {
    if (this.pumping) return;
    this.pumping = true;
    this.pump().catch((e: unknown) => this.deps.log.error({ err: errorMessage(e) }, 'the background teardown stopped'));
  }

  private async pump(): Promise<void> {
    try {
      while (this.ready.length > 0) {
        if (this.deps.hold) await this.deps.hold();
        const batch = this.ready.splice(0, MAX_BATCH).flatMap((key) => {
          const entry = this.pending.get(key);
          return entry?.state === 'queued' ? [entry] : [];
        });
        for (const entry of batch) entry.state = 'running';
        const outcomes = await this.runBatch(batch.map((e) => e.job));
        batch.forEach((entry, i) => this.settled(entry, outcomes[i]!));
      }
    } finally {
      this.pumping = false;
    }
  }

  private async runBatch(jobs: readonly TeardownJob[]): Promise<TeardownOutcome[]> {
    // Every job's links at once: their RCU waits overlap, as when the kernel dismantles many netns together.
    const links = await Promise.all(jobs.map((job) => this.undo(job.steps.filter((s) => s.kind !== 'releaseIpam'))));
    return Promise.all(
      jobs.map(async (job, i): Promise<TeardownOutcome> => {
        // A link that could not be deleted may still carry its address: the leases stay until it is gone.
        const failures = [...links[i]!];
        if (failures.length === 0)
          failures.push(...(await this.undo(job.steps.filter((s) => s.kind === 'releaseIpam'))));
        if (failures.length > 0) return err(teardownFailed(job.record, failures));
        try {
          await this.deps.finish(job);
          return ok(undefined);
        } catch (e) {
          const { containerId, ifname } = job.record.meta;
          return err(toCniError(e, CniCode.IoFailure, `closing the record of ${containerId}/${ifname}`));
        }
      }),
    );
  }

  /** Undoes steps in the stages of undoStages, past failures; answers what failed. */
  private async undo(steps: readonly UndoStep[]): Promise<string[]> {
    const failures: string[] = [];
    for (const stage of undoStages(steps)) {
      const results = await Promise.all(
        stage.map((step) => this.deps.runStep(step).catch((e: unknown) => err(toCniError(e)))),
      );
      results.forEach((r, k) => {
        if (!r.ok) failures.push(`${describeUndo(stage[k]!)}: ${r.error.message}`);
      });
    }
    return failures;
  }

  private settled(entry: Pending, outcome: TeardownOutcome): void {
    entry.attempts++;
    const waiters = entry.waiters.splice(0);
    if (outcome.ok || waiters.some((w) => w.handBack) || this.closed) {
      // Gone from the queue before anyone waiting hears of it: an ADD that waited finds the attachment settled.
      this.pending.delete(entry.key);
      entry.job.release?.();
    } else {
      const { first, max } = this.deps.retryMs ?? DEFAULT_RETRY;
      entry.state = 'waiting';
      entry.retry = setTimeout(() => this.requeue(entry), Math.min(max, first * 2 ** (entry.attempts - 1)));
      entry.retry.unref();
    }
    if (!outcome.ok) {
      this.failedAttempts++;
      const { containerId, ifname } = entry.job.record.meta;
      this.deps.log.error(
        { containerId, ifname, attempts: entry.attempts, err: outcome.error.message },
        'background teardown failed',
      );
    }
    for (const w of waiters) w.resolve(outcome);
    if (this.pending.size === 0) for (const resolve of this.idle.splice(0)) resolve();
  }
}
