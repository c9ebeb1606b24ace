/**
 * One journaled transaction on one attachment record: begun (a new record) or reopened (an existing one), each undo
 * step recorded before the change it undoes, committed, closed, and on failure rolled back from the record as the
 * journal holds it (nothing is undone from memory). undoRecord is the one code path that undoes a whole record: a
 * failed ADD's rollback, DEL, GC and crash recovery all run it.
 */
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import type { CniResult } from '../cni/types';
import type { UndoStep } from '../drivers/driver';
import { describeUndo, undoStages } from '../drivers/undo';
import type { AttachmentTag, AttachmentMeta, CommitDetails, Journal, JournalEntry, NetworkAttachment } from './journal';
import { attachmentSteps, unreadableRecordError, type AttachmentRecord, type PodNetworksChange } from './journal';

/** Runs one recorded undo step (the driver registry's runner, its kernel and IPAM bound). */
export type UndoOne = (step: UndoStep) => Promise<Result<void>>;

export interface TransactionPorts {
  readonly journal: Journal;
  readonly undo: UndoOne;
  /** Told of every record undone whole and removed (the node's attachment quota, the recently-removed cache). */
  readonly removed?: (record: AttachmentRecord) => void;
}

/** Why undoing some attachments of a record did not finish: those whose steps could not all be undone stay recorded. */
export interface AttachmentsLeft {
  readonly message: string;
  readonly failed: readonly AttachmentTag[];
}

const undoFailed = (failures: readonly string[], what: string): CniError =>
  new CniError(CniCode.Internal, `could not undo ${failures.length} step(s) of ${what}: ${failures.join('; ')}`);

/** Runs undo steps in the stages of undoStages (reverse order), continuing past failures, reported together. */
export async function runUndoSteps(undo: UndoOne, steps: readonly UndoStep[], what: string): Promise<Result<void>> {
  const failures: string[] = [];
  for (const stage of undoStages(steps)) {
    const results = await Promise.all(stage.map((step) => undo(step)));
    results.forEach((r, k) => {
      if (!r.ok) failures.push(`${describeUndo(stage[k]!)}: ${r.error.message}`);
    });
  }
  return failures.length ? err(undoFailed(failures, what)) : ok(undefined);
}

/**
 * Undoes every step a record holds (marking it deleting first, so a crash midway finishes the undo), continuing past
 * failures; removes the record when all succeeded. An unreadable record is never undone.
 */
export async function undoRecord(ports: TransactionPorts, record: AttachmentRecord): Promise<Result<void>> {
  const { containerId, ifname } = record.meta;
  if (record.unreadable) return err(unreadableRecordError(record));
  if (!record.deleting) await Transaction.reopened(ports, containerId, ifname, (tx) => tx.markDeleting());
  const undone = await runUndoSteps(ports.undo, record.undo, `${containerId}/${ifname}`);
  if (!undone.ok) return undone;
  await ports.journal.remove(containerId, ifname);
  ports.removed?.(record);
  return ok(undefined);
}

export class Transaction {
  private closed = false;

  private constructor(
    private readonly ports: TransactionPorts,
    private readonly entry: JournalEntry,
    readonly containerId: string,
    readonly ifname: string,
  ) {}

  /** Starts a new record; fails if one exists for the same attachment (callers check first). */
  static async begin(ports: TransactionPorts, meta: AttachmentMeta): Promise<Transaction> {
    return new Transaction(ports, await ports.journal.begin(meta), meta.containerId, meta.ifname);
  }

  /** Reopens an existing record to append to it (a change, a detach, a deletion, recovery). */
  static async reopen(ports: TransactionPorts, containerId: string, ifname: string): Promise<Transaction> {
    return new Transaction(ports, await ports.journal.reopen(containerId, ifname), containerId, ifname);
  }

  /** Runs `body` in the reopened record, closing it whatever happens. */
  static async reopened<T>(
    ports: TransactionPorts,
    containerId: string,
    ifname: string,
    body: (tx: Transaction) => Promise<T>,
  ): Promise<T> {
    const tx = await Transaction.reopen(ports, containerId, ifname);
    try {
      return await body(tx);
    } finally {
      await tx.close();
    }
  }

  /** Journals how to undo the change about to be made for `attachment`: call it before making the change. */
  record(step: UndoStep, attachment: AttachmentTag): Promise<void> {
    return this.entry.record(step, attachment);
  }

  event(what: string, ms?: number): Promise<void> {
    return this.entry.event(what, ms);
  }

  /** A change of a running pod's networks starts: until the next commit, recovery undoes what it added. */
  change(change: PodNetworksChange): Promise<void> {
    return this.entry.change(change);
  }

  /** Every addition of the change under way is complete: recovery finishes the change from here. */
  added(attachments: readonly NetworkAttachment[]): Promise<void> {
    return this.entry.added(attachments);
  }

  /** Every step of `attachment` has been undone: the record no longer holds them. */
  detached(attachment: AttachmentTag): Promise<void> {
    return this.entry.detached(attachment);
  }

  commit(result: CniResult, cniVersion: string, details?: CommitDetails): Promise<void> {
    return this.entry.commit(result, cniVersion, details);
  }

  markDeleting(): Promise<void> {
    return this.entry.markDeleting();
  }

  /** Closes the record's file; closing again does nothing. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.entry.close();
  }

  /** Closes the transaction and undoes, whole, what its record now holds (undoRecord); no record, nothing to undo. */
  async rollback(): Promise<Result<void>> {
    await this.close();
    const record = await this.ports.journal.load(this.containerId, this.ifname);
    return record ? undoRecord(this.ports, record) : ok(undefined);
  }

  /**
   * Undoes the steps of some attachments of the record only (a change of a running pod's networks), read from the
   * record as it is now, each retired from it (a `detached` line) once all its steps are undone.
   */
  async undoAttachments(keys: readonly AttachmentTag[]): Promise<Result<void, AttachmentsLeft>> {
    const record = await this.ports.journal.load(this.containerId, this.ifname);
    const failed: AttachmentTag[] = [];
    const errors: string[] = [];
    for (const key of keys) {
      const steps = record ? attachmentSteps(record, key) : [];
      const what = `network ${key.network} as ${key.ifname} of ${this.containerId}/${this.ifname}`;
      const r = await runUndoSteps(this.ports.undo, steps, what);
      if (r.ok) await this.detached(key);
      else {
        failed.push(key);
        errors.push(r.error.message);
      }
    }
    return failed.length === 0 ? ok(undefined) : err({ message: errors.join('; '), failed });
  }
}
