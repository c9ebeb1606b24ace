/**
 * The node's attachment quota (--max-node-attachments): how many pod interfaces the journal holds, counted once on
 * first use and then kept as ADDs, DELs, changes and detaches reserve and give back room.
 */
import { CniCode, CniError } from '../cni/errors';
import type { AttachmentRecord, Journal } from './journal';

/** How many pod interfaces a record holds: its committed attachments, or while uncommitted, its planned networks. */
export const attachmentsOf = (record: AttachmentRecord): number =>
  record.details?.attachments.length ?? record.meta.networks.length;

const nodeFull = (held: number, n: number, max: number): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `this node holds ${held} pod interfaces; ${n} more would pass its limit (--max-node-attachments ${max})`,
    "try again when pods have been deleted, or ask the node's operator to raise the limit",
  );

export class AttachmentQuota {
  /** Pod interfaces the journal holds; undefined until first counted. */
  private held: number | undefined;

  constructor(
    private readonly journal: Journal,
    /** Unbounded when not set. */
    private readonly max: number | undefined,
  ) {}

  /** Reserves room for `n` more pod interfaces on this node, or says the node is full. */
  async reserve(n: number): Promise<CniError | undefined> {
    if (this.max === undefined) return undefined;
    if (this.held === undefined) {
      const records = await this.journal.list();
      this.held ??= records.reduce((sum, r) => sum + attachmentsOf(r), 0);
    }
    if (this.held + n > this.max) return nodeFull(this.held, n, this.max);
    this.held += n;
    return undefined;
  }

  release(n: number): void {
    if (this.held !== undefined) this.held = Math.max(0, this.held - n);
  }
}
