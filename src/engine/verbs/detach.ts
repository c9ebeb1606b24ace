/**
 * Detach: removes one network from a running pod. The steps recorded for that attachment only are undone, then the
 * record says it is gone and commits the pod's result without it. The pod's other networks are untouched; the default
 * network stays.
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import { mergeResults, networkStatus } from '../../networks/status';
import type { EngineContext } from '../context';
import { attachmentSteps, unreadableRecordError, type AttachmentTag, type AttachmentRecord } from '../journal';
import { runUndoSteps, Transaction } from '../transaction';

/** The pod's record, when `attachment` can be detached from it; else why not. */
function detachable(
  record: AttachmentRecord | undefined,
  [containerId, ifname]: readonly [string, string],
  attachment: AttachmentTag,
  label: string,
): Result<AttachmentRecord> {
  if (!record?.result || record.deleting) {
    return err(new CniError(CniCode.UnknownContainer, `no attachment ${ifname} is known for container ${containerId}`));
  }
  if (record.unreadable) return err(unreadableRecordError(record));
  const attachments = record.details?.attachments ?? [];
  const target = attachments.find((a) => a.network === attachment.network && a.ifname === attachment.ifname);
  if (!target) {
    const attached = `attached: ${attachments.map((a) => `${a.network} as ${a.ifname}`).join(', ')}`;
    return err(new CniError(CniCode.InvalidNetworkConfig, `${label}: the pod has no such attachment`, attached));
  }
  if (target.isDefault) {
    const why = `${label}: the default network cannot be detached from a running pod`;
    return err(new CniError(CniCode.InvalidNetworkConfig, why));
  }
  if (record.undoOwners.some((o) => o === undefined)) {
    const why = 'the pod was attached by an older plexusd (journal v0), whose steps name no network';
    const only = 'its networks can only be removed together, by DEL';
    return err(new CniError(CniCode.InvalidNetworkConfig, `${label}: ${why}; ${only}`));
  }
  return ok(record);
}

export function detachAttachment(
  ctx: EngineContext,
  containerId: string,
  runtimeIfname: string,
  attachment: AttachmentTag,
): Promise<Result<CniResult>> {
  return ctx.locks.run(containerId, async () => {
    const label = `network ${attachment.network} as ${attachment.ifname} of ${containerId}/${runtimeIfname}`;
    const loaded = await ctx.transactionPorts.journal.load(containerId, runtimeIfname);
    const checked = detachable(loaded, [containerId, runtimeIfname], attachment, label);
    if (!checked.ok) return checked;
    const record = checked.value;
    const undone = await runUndoSteps(ctx.transactionPorts.undo, attachmentSteps(record, attachment), label);
    if (!undone.ok) return undone;
    const remaining = (record.details?.attachments ?? []).filter(
      (a) => a.network !== attachment.network || a.ifname !== attachment.ifname,
    );
    const result = mergeResults(remaining.map((a) => a.result));
    const status = networkStatus(remaining);
    await Transaction.reopened(ctx.transactionPorts, containerId, runtimeIfname, async (tx) => {
      await tx.detached(attachment);
      await tx.commit(result, record.cniVersion ?? '1.1.0', { attachments: remaining, networkStatus: status });
    });
    ctx.quota.release(1);
    ctx.report((sink) => sink.attached(record.meta.pod, containerId, status, []));
    return ok(result);
  });
}
