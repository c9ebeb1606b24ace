/**
 * Hot-plug: makes a running pod's secondary networks what its annotation asks for now, as one journaled transaction
 * on the pod's record. Networks are added first; if one fails, those added are undone and the pod is as it was. Then
 * the networks no longer asked for are removed. Untouched attachments keep their interfaces. After a crash in the
 * middle of a change, finishChange completes or undoes it from the record.
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { addedInterfaces, mergeResults, networkStatus } from '../../networks/status';
import { planChange } from '../change-plan';
import type { EngineContext, PodAnnotations } from '../context';
import { unreadableRecordError, type AttachmentTag, type AttachmentRecord, type NetworkAttachment } from '../journal';
import { assignDevices } from '../kubelet-devices';
import { planPod, runningPodRequest, type AttachmentStep } from '../plan';
import { claimedOutcomes } from '../claims/networks';
import { claimedDevicesOf, reportClaims } from '../claims/reports';
import { claimedNotOffered } from '../claims/unoffered';
import { refuseTakenNames } from '../taken-names';
import { Transaction } from '../transaction';
import { attachStep } from './attach';

export interface NetworksChanged {
  readonly added: readonly AttachmentTag[];
  readonly removed: readonly AttachmentTag[];
}

/** A change planned and validated: the steps to add (each under the interface it gets), the attachments to remove. */
interface PlannedChange {
  readonly add: readonly { readonly step: AttachmentStep; readonly ifname: string }[];
  readonly remove: readonly AttachmentTag[];
}

type Committed = AttachmentRecord & { readonly result: NonNullable<AttachmentRecord['result']> };

const sameKey = (a: AttachmentTag, b: AttachmentTag): boolean => a.network === b.network && a.ifname === b.ifname;

const unknownAttachment = (containerId: string, ifname: string): CniError =>
  new CniError(CniCode.UnknownContainer, `no attachment ${ifname} is known for container ${containerId}`);

const olderJournal = (): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    "the pod's networks cannot change while it runs: " +
      'it was attached by an older plexusd (journal v0), whose steps name no network',
  );

const removalFailed = (failed: readonly AttachmentTag[], error: string): CniError =>
  new CniError(
    CniCode.Internal,
    `the new networks were added, but removing ${failed.map((f) => `${f.network} as ${f.ifname}`).join(', ')} ` +
      `failed: ${error}`,
    "they stay recorded; the pod's DEL or the next change removes them",
  );

/** The attachments of `before` without those `gone`, then those `added`. */
const remaining = (
  before: readonly NetworkAttachment[],
  gone: readonly AttachmentTag[],
  added: readonly NetworkAttachment[],
): NetworkAttachment[] => [...before.filter((a) => !gone.some((g) => sameKey(g, a))), ...added];

/** Commits the pod's networks as `final` now are. */
function commitAttachments(
  tx: Transaction,
  record: AttachmentRecord,
  final: readonly NetworkAttachment[],
): Promise<void> {
  const details = { attachments: [...final], networkStatus: networkStatus(final) };
  return tx.commit(mergeResults(final.map((a) => a.result)), record.cniVersion ?? '1.1.0', details);
}

/** Answers what changed (nothing, when the pod already has what it asks for). */
export function changeNetworks(
  ctx: EngineContext,
  containerId: string,
  runtimeIfname: string,
  annotations: Readonly<Record<string, string>>,
): Promise<Result<NetworksChanged>> {
  return ctx.locks.run(containerId, async () => {
    const record = await ctx.transactionPorts.journal.load(containerId, runtimeIfname);
    if (!record?.result || record.deleting) return err(unknownAttachment(containerId, runtimeIfname));
    if (record.unreadable) return err(unreadableRecordError(record));
    if (record.undoOwners.some((o) => o === undefined)) return err(olderJournal());
    const committed = record as Committed;
    const planned = await planRunningChange(ctx, committed, annotations);
    if (!planned.ok) return planned;
    if (planned.value.add.length === 0 && planned.value.remove.length === 0) return ok({ added: [], removed: [] });
    const full = await ctx.quota.reserve(planned.value.add.length);
    if (full) return err(full);
    const apply = (tx: Transaction): Promise<Result<NetworksChanged>> => applyChange(ctx, tx, committed, planned.value);
    return Transaction.reopened(ctx.transactionPorts, containerId, runtimeIfname, apply);
  });
}

/** Plans the change and validates it (devices, the pod's netns, free names) before anything is touched. */
async function planRunningChange(
  ctx: EngineContext,
  record: Committed,
  annotations: PodAnnotations,
): Promise<Result<PlannedChange>> {
  const req = runningPodRequest(record);
  // The networks the pod's DRA claims give it stay: they are in the plan as they were at ADD.
  const claimed = claimedDevicesOf(ctx, record.meta.pod.uid);
  const { settings, networks, drivers } = ctx;
  const planned = planPod({ settings, networks, drivers, req, annotations, runningPod: true, claimed });
  if (!planned.ok) return planned;
  const attachments = record.details?.attachments ?? [];
  const change = planChange(attachments, planned.value, (s) => s.planned);
  if (!change.ok) return change;
  const notOffered = claimedNotOffered(change.value.add.flatMap((a) => (a.step.claimed ? [a.step.claimed] : [])));
  if (notOffered) return err(notOffered);
  const remove = change.value.remove.map((a) => ({ network: a.network, ifname: a.ifname }));
  if (change.value.add.length === 0 && remove.length === 0) return ok({ add: [], remove });
  // Networks added to the running pod take devices the kubelet allocated it that no attachment uses yet (one that
  // this change removes is still in use until the additions are done).
  const taken = attachments.flatMap((a) => (a.kubeletDevice ? [a.kubeletDevice] : []));
  const steps = change.value.add.map((a) => a.step);
  const devised = await assignDevices(steps, record.meta.pod, ctx.devices, taken);
  if (!devised.ok) return devised;
  const add = change.value.add.map((a, i) => ({ ...a, step: devised.value[i]! }));
  const netnsProblem = ctx.podNetnsProblem(record.meta.netns);
  if (netnsProblem) return err(netnsProblem);
  const free = await refuseTakenNames(
    ctx.kernel,
    record.meta.netns,
    add.map((a) => a.ifname),
  );
  return free.ok ? ok({ add, remove }) : free;
}

/** Runs a planned change in the reopened record: additions first, undone together if one fails; then removals. */
async function applyChange(
  ctx: EngineContext,
  tx: Transaction,
  record: Committed,
  change: PlannedChange,
): Promise<Result<NetworksChanged>> {
  const { containerId } = record.meta;
  const addKeys = change.add.map((a) => ({ network: a.step.planned.network.key, ifname: a.ifname }));
  await tx.change({ add: addKeys, remove: change.remove });
  const added: NetworkAttachment[] = [];
  for (const { step, ifname } of change.add) {
    const planned = { ...step.planned, ifname };
    const renamed: AttachmentStep = { ...step, planned, request: { ...step.request, ifname } };
    const attached = await attachStep(ctx, { tx, step: renamed });
    if (attached.ok) {
      added.push(attached.value);
      continue;
    }
    // Leave the pod as it was: undo what this change added, and commit the pod's networks as they were.
    const undone = await tx.undoAttachments(addKeys);
    await tx.commit(record.result, record.cniVersion ?? '1.1.0', record.details);
    ctx.quota.release(change.add.length);
    const left = undone.ok ? '' : `; undoing the networks added so far failed (GC retries): ${undone.error.message}`;
    return err(new CniError(attached.error.code, `${attached.error.message}${left}`, attached.error.details));
  }
  await tx.added(added);
  const removed = await tx.undoAttachments(change.remove);
  const gone = change.remove.filter((r) => removed.ok || !removed.error.failed.some((f) => sameKey(f, r)));
  const final = remaining(record.details?.attachments ?? [], gone, added);
  await commitAttachments(tx, record, final);
  ctx.quota.release(gone.length);
  const status = networkStatus(final);
  ctx.report((sink) => sink.attached(record.meta.pod, containerId, status, addedInterfaces(added), gone));
  reportClaims(ctx, record.meta.pod, claimedOutcomes(claimedDevicesOf(ctx, record.meta.pod.uid), final));
  if (!removed.ok) return err(removalFailed(removed.error.failed, removed.error.message));
  return ok({ added: addKeys, removed: gone });
}

/**
 * After a crash in the middle of a change of a running pod's networks: a change cut off while adding is undone (the
 * pod is as it was); one cut off while removing, its additions complete, is finished. Either way the pod's networks
 * are committed as they then are, and the hot-plug controller compares the pod with its annotation again.
 */
export function finishChange(ctx: EngineContext, record: AttachmentRecord): Promise<Result<void>> {
  const { containerId, ifname } = record.meta;
  const change = record.changing!;
  return Transaction.reopened(ctx.transactionPorts, containerId, ifname, async (tx) => {
    const finishing = change.added !== undefined;
    const undone = await tx.undoAttachments(finishing ? change.remove : change.add);
    const gone = (finishing ? change.remove : []).filter(
      (k) => undone.ok || !undone.error.failed.some((f) => sameKey(f, k)),
    );
    const final = remaining(record.details?.attachments ?? [], gone, change.added ?? []);
    await commitAttachments(tx, record, final);
    if (undone.ok) return ok(undefined);
    const what = `${finishing ? 'finishing' : 'undoing'} an interrupted change of ${containerId}/${ifname}`;
    return err(new CniError(CniCode.Internal, `${what}: ${undone.error.message}`));
  });
}
