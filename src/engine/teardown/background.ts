/**
 * DEL off the critical path. A DEL says in the record that the attachment is being torn down (`deleting`, which a
 * crash leaves for recovery to finish), undoes at once what cannot wait (steps.ts), and answers; the links go in the
 * background (queue.ts), and the leases once the links are gone. While it is pending, a DEL of the same attachment
 * answers at once, an ADD waits for it (settle), and CHECK and GC see a record being deleted.
 */
import type { Logger } from 'pino';
import { type CniError, type Result, err, ok } from '../../cni/errors';
import type { UndoStep } from '../../drivers/driver';
import type { Journal } from '../journal';
import { unreadableRecordError, type AttachmentRecord } from '../journal/record';
import { nsfsDevice, pinNetns, type PinnedNetns } from './pinned-netns';
import { TeardownQueue, type TeardownOutcome, type TeardownStats } from './queue';
import { placeForBackground, splitTeardown } from './steps';

/** The test-only knob that holds the background before each batch (ms), so a test can act while teardowns pend. */
export const HOLD_ENV = 'PLEXUS_TEST_TEARDOWN_HOLD_MS';

export interface TeardownSettings {
  /** The daemon's netns as a path: host links are deleted from it, off the kernel worker (none: as recorded). */
  readonly hostNetns?: string;
  /** Hold a pod's netns open until the background has deleted its links (pinned-netns.ts). */
  readonly pinNetns?: boolean;
  /** Test-only: waited before each batch (HOLD_ENV). */
  readonly holdMs?: number;
}

/** What plexusd runs with: host links off the worker, pod netns held, the hold from the environment (tests only). */
export function daemonTeardownSettings(env: NodeJS.ProcessEnv = process.env): TeardownSettings {
  const hold = Number(env[HOLD_ENV] ?? 0);
  return { hostNetns: '/proc/self/ns/net', pinNetns: true, ...(hold > 0 ? { holdMs: hold } : {}) };
}

export interface BackgroundTeardownDeps {
  readonly journal: Journal;
  /** Undoes one step (the drivers' undo, with the kernel and IPAM). */
  readonly undo: (step: UndoStep) => Promise<Result<void, CniError>>;
  /** A record was closed, every step of it undone: the engine's own accounts. */
  readonly closed: (record: AttachmentRecord) => void;
  readonly log: Logger;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class BackgroundTeardown {
  private readonly queue: TeardownQueue;
  private readonly nsfsDev: number | undefined;

  constructor(
    private readonly deps: BackgroundTeardownDeps,
    private readonly settings: TeardownSettings,
  ) {
    this.nsfsDev = settings.pinNetns ? nsfsDevice() : undefined;
    const holdMs = settings.holdMs;
    this.queue = new TeardownQueue({
      runStep: (step) => deps.undo(placeForBackground(step, settings.hostNetns)),
      finish: async (job) => {
        await deps.journal.remove(job.record.meta.containerId, job.record.meta.ifname);
        deps.closed(job.record);
      },
      log: deps.log,
      ...(holdMs ? { hold: () => sleep(holdMs) } : {}),
    });
  }

  /** How many attachments are being torn down. */
  get size(): number {
    return this.queue.size;
  }

  stats(): TeardownStats {
    return this.queue.stats();
  }

  pending(containerId: string, ifname: string): boolean {
    return this.queue.has(containerId, ifname);
  }

  /** Waits for a pending teardown; a failed one is handed back (see TeardownQueue.settle). */
  settle(containerId: string, ifname: string): Promise<TeardownOutcome | undefined> {
    return this.queue.settle(containerId, ifname);
  }

  /**
   * Before an ADD: waits for the teardown of the same attachment (its outcome; a failed one is the ADD's to undo) and
   * for those of other sandboxes in the same netns, whose interface names the new one may take.
   */
  async beforeAdd(containerId: string, ifname: string, netns: string): Promise<TeardownOutcome | undefined> {
    const [own] = await Promise.all([this.queue.settle(containerId, ifname), this.queue.settleNetns(netns)]);
    return own;
  }

  /** For a stopping daemon: see TeardownQueue.drain. */
  drain(timeoutMs: number): Promise<number> {
    return this.queue.drain(timeoutMs);
  }

  /**
   * Starts tearing a record down: the record says `deleting`, the steps that cannot wait are undone by `runNow`, and
   * the rest is queued. When this answers ok, the DEL may answer.
   */
  async start(
    record: AttachmentRecord,
    runNow: (steps: readonly UndoStep[]) => Promise<Result<void, CniError>>,
  ): Promise<Result<void, CniError>> {
    const { containerId, ifname, netns } = record.meta;
    if (this.queue.has(containerId, ifname)) return ok(undefined);
    if (record.unreadable) return err(unreadableRecordError(record));
    const entry = await this.deps.journal.reopen(containerId, ifname);
    try {
      if (!record.deleting) await entry.markDeleting();
      await entry.event('teardown: links and leases in the background');
    } finally {
      await entry.close();
    }
    const { now, later } = splitTeardown(record.undo);
    if (now.length > 0) {
      const done = await runNow(now);
      if (!done.ok) return done;
    }
    const pin = this.pinFor(netns, later);
    const steps = pin ? later.map((s) => inPinned(s, netns, pin)) : later;
    if (!this.queue.add({ record, steps, ...(pin ? { release: () => pin.release() } : {}) })) {
      // A stopping daemon: the record says deleting, and the next start finishes it.
      pin?.release();
      this.deps.log.warn({ containerId, ifname }, 'teardown left to the next start of plexusd: the daemon is stopping');
    }
    return ok(undefined);
  }

  /** A hold on the pod's netns, when a step deletes something in it (a veth's host end tells for both ends). */
  private pinFor(netns: string, steps: readonly UndoStep[]): PinnedNetns | undefined {
    if (this.nsfsDev === undefined || !netns) return undefined;
    if (!steps.some((s) => (s.kind === 'deleteLink' || s.kind === 'deleteRoute') && s.netns === netns))
      return undefined;
    return pinNetns(netns, this.nsfsDev);
  }
}

const inPinned = (step: UndoStep, netns: string, pin: PinnedNetns): UndoStep =>
  (step.kind === 'deleteLink' || step.kind === 'deleteRoute') && step.netns === netns
    ? { ...step, netns: pin.path }
    : step;
