/**
 * After a crash: undoes every transaction that was not committed (an ADD cut off) or was being deleted (a DEL cut
 * off), and finishes every change of a running pod's networks that was cut off. Answers what was undone and what
 * could not be, record by record. With the background teardown, the records to undo go to it all at once (one batch,
 * as the DELs they were), and each is waited for.
 */
import { err, toCniError, type CniError, type Result } from '../../cni/errors';
import type { EngineContext } from '../context';
import { unreadableRecordError, type AttachmentRecord } from '../journal';
import { undoRecord } from '../transaction';
import { tearDown } from './del';
import { finishChange } from './change';

export interface UnfinishedUndone {
  readonly undone: readonly AttachmentRecord[];
  readonly failed: readonly { readonly record: AttachmentRecord; readonly error: CniError }[];
}

const asError = (e: unknown): Result<never> => err(toCniError(e));

export async function undoUnfinished(ctx: EngineContext): Promise<UnfinishedUndone> {
  const undone: AttachmentRecord[] = [];
  const failed: { record: AttachmentRecord; error: CniError }[] = [];
  const toTearDown: AttachmentRecord[] = [];
  for (const record of await ctx.transactionPorts.journal.list()) {
    // A record that cannot be read is never undone, nor is its change finished: it stays for an operator.
    if (record.unreadable) {
      failed.push({ record, error: unreadableRecordError(record) });
      continue;
    }
    let r: Result<void>;
    if (record.result && !record.deleting && record.changing) {
      r = await ctx.locks.run(record.meta.containerId, () => finishChange(ctx, record)).catch(asError);
    } else if (record.result && !record.deleting) continue;
    else if (ctx.teardown) {
      toTearDown.push(record);
      continue;
    }
    // A journal that cannot be written (a full disk) fails this record, not the start of the daemon.
    else r = await undoRecord(ctx.transactionPorts, record).catch(asError);
    if (r.ok) undone.push(record);
    else failed.push({ record, error: r.error });
  }
  const tornDown = await Promise.all(toTearDown.map((record) => tearDownNow(ctx, record)));
  tornDown.forEach((r, i) => {
    if (r.ok) undone.push(toTearDown[i]!);
    else failed.push({ record: toTearDown[i]!, error: r.error });
  });
  return { undone, failed };
}

/** Starts a record's teardown under its container's lock and waits for it (a failed one is handed back, and kept). */
async function tearDownNow(ctx: EngineContext, record: AttachmentRecord): Promise<Result<void>> {
  const { containerId, ifname } = record.meta;
  const started = await ctx.locks.run(containerId, () => tearDown(ctx, record)).catch(asError);
  if (!started.ok) return started;
  return (await ctx.teardown?.settle(containerId, ifname)) ?? started;
}
