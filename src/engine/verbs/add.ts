/**
 * ADD: plans the pod's networks and validates everything before touching anything, then attaches them one after
 * another (plan order, NPWG) in one transaction; the first failure rolls the whole record back. A retried ADD of a
 * committed attachment gets the stored answer.
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { abortReason } from '../../common/abort';
import type { CniResult } from '../../cni/types';
import { addedInterfaces, mergeResults, networkStatus } from '../../networks/status';
import type { ContainerRequest, EngineContext, PodAnnotations } from '../context';
import { applyDefaultRoute } from '../default-route';
import { unreadableRecordError, type AttachmentRecord, type NetworkAttachment } from '../journal';
import { assignDevices } from '../kubelet-devices';
import { planPod, podIdentityOf, type AttachmentStep } from '../plan';
import { namesCheckedFirst, refuseTakenNames, takenNameOr } from '../taken-names';
import { Transaction, undoRecord } from '../transaction';
import { attachStep } from './attach';
import { claimedOutcomes, failedOutcomes } from '../claims/networks';
import { claimedDevicesOf, reportClaims } from '../claims/reports';
import { claimedElsewhere } from '../claims/elsewhere';
import { claimedNotOffered } from '../claims/unoffered';
import type { ClaimedNetworkDevice, PodClaims } from '../claims/ports';
import { errorMessage } from '../../common/error-message';

const attachedElsewhere = (req: ContainerRequest, netns: string): CniError =>
  new CniError(
    CniCode.InvalidEnvironment,
    `container ${req.containerId} already has ${req.ifname} attached in ${netns}`,
    'DEL it before adding it again',
  );

const leftoversRemain = (req: ContainerRequest, why: string): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `leftovers of an earlier ADD of ${req.containerId}/${req.ifname} could not be removed`,
    why,
  );

function repeatedAddDiffers(
  req: ContainerRequest,
  record: AttachmentRecord,
  recorded: readonly string[],
  asked: readonly string[],
): CniError {
  const what = `CNI_CONTAINERID ${req.containerId} with CNI_IFNAME ${req.ifname}`;
  const attached = `attached (runtime network ${record.meta.cniNetwork}): ${recorded.join(', ') || 'none'}`;
  const message = `${what} is attached already, to other networks than this ADD asks for`;
  const details = `${attached}; asked: ${asked.join(', ') || 'none'}. DEL it before adding it again`;
  return new CniError(CniCode.InvalidEnvironment, message, details);
}

/** An ADD its runtime gave up on (it closed its connection), stopped at a safe point and rolled back. */
const abandoned = (req: ContainerRequest, signal: AbortSignal): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `ADD ${req.containerId}/${req.ifname} stopped: ${abortReason(signal)}`,
    'what it had made is undone; a retried ADD starts afresh',
  );

const unexpected = (req: ContainerRequest, e: unknown): CniError =>
  e instanceof CniError
    ? e
    : new CniError(
        CniCode.Internal,
        `ADD ${req.containerId}/${req.ifname} failed unexpectedly: ${errorMessage(e)}`,
        (e as Error).stack ?? '',
      );

/** One ADD as each of its steps sees it: the engine, the call, and what the API knows of the pod. */
interface AddCall {
  readonly ctx: EngineContext;
  readonly req: ContainerRequest;
  readonly annotations: PodAnnotations;
  /** The devices the pod's DRA claims give its networks: read once, so the plan and the report agree. */
  readonly claimed: readonly ClaimedNetworkDevice[];
  /** Aborted when the runtime has given up on this ADD: it stops at the next safe point and rolls back. */
  readonly signal: AbortSignal | undefined;
}

/** The error to stop with when the runtime has given up on the call, at a safe point (nothing half-made). */
const givenUp = ({ req, signal }: AddCall): CniError | undefined =>
  signal?.aborted ? abandoned(req, signal) : undefined;

const planOf = ({ ctx, req, annotations, claimed }: AddCall): ReturnType<typeof planPod> =>
  planPod({ settings: ctx.settings, networks: ctx.networks, drivers: ctx.drivers, req, annotations, claimed });

/** The failure, with what a rollback that did not finish left behind. */
function afterRollback({ ctx, req }: AddCall, cause: CniError, undone: Result<void>): CniError {
  if (undone.ok) return cause;
  const { containerId, ifname } = req;
  ctx.log.error({ containerId, ifname, err: undone.error.message }, 'rollback incomplete; recovery will retry');
  const left = `rollback incomplete (will be retried): ${undone.error.message}`;
  return new CniError(cause.code, cause.message, `${cause.details}${cause.details ? '; ' : ''}${left}`);
}

export async function add(ctx: EngineContext, req: ContainerRequest, signal?: AbortSignal): Promise<Result<CniResult>> {
  // The pod as the API knows it: its annotations, and proof (its UID) that this sandbox is still that pod's. A pod
  // that cannot be found gets no event: the name may be another pod's now.
  let podAnnotations: PodAnnotations;
  let podUid = req.args.podUid;
  let named: PodClaims | undefined;
  if (ctx.pods && req.args.podNamespace && req.args.podName) {
    const pod = await ctx.pods.get(req.args.podNamespace, req.args.podName, req.args.podUid);
    if (!pod.ok) return pod;
    podAnnotations = pod.value.annotations;
    podUid = pod.value.uid || podUid;
    if (pod.value.claims?.length) named = { namespace: req.args.podNamespace, claims: pod.value.claims };
  }
  const claimed = claimedDevicesOf(ctx, podUid, named);
  const notOffered = claimedNotOffered(claimed);
  if (notOffered) {
    ctx.report((sink) => sink.failed(podIdentityOf(req), req.containerId, notOffered));
    reportClaims(ctx, podIdentityOf(req), failedOutcomes(claimed, notOffered.message));
    return err(notOffered);
  }
  const elsewhere = claimed.length
    ? claimedElsewhere(claimed, podUid, await ctx.transactionPorts.journal.list())
    : undefined;
  if (elsewhere) {
    // The claim's status stays as the pod that has the device made it.
    ctx.report((sink) => sink.failed(podIdentityOf(req), req.containerId, elsewhere));
    return err(elsewhere);
  }
  const call: AddCall = { ctx, req, annotations: podAnnotations, claimed, signal };
  const added = await ctx.locks.run(req.containerId, () => addLocked(call));
  if (!added.ok) {
    ctx.report((sink) => sink.failed(podIdentityOf(req), req.containerId, added.error));
    reportClaims(ctx, podIdentityOf(req), failedOutcomes(claimed, added.error.message));
  }
  return added;
}

async function addLocked(call: AddCall): Promise<Result<CniResult>> {
  const { ctx, req } = call;
  // A teardown still under way, of this attachment or in its netns, is waited for: nothing of it is reused. One that
  // failed is handed back, and its record undone here.
  await ctx.teardown?.beforeAdd(req.containerId, req.ifname, req.netns);
  const existing = await ctx.transactionPorts.journal.load(req.containerId, req.ifname);
  if (existing?.unreadable) return err(unreadableRecordError(existing));
  if (existing?.result && !existing.deleting) {
    // A retried ADD (e.g. after a lost reply) gets the same answer; one that asks for something else is an error.
    if (existing.meta.netns !== req.netns) return err(attachedElsewhere(req, existing.meta.netns));
    const other = otherAttachments(call, existing);
    return other ? err(other) : ok(existing.result);
  }
  if (existing) {
    const cleaned = await undoRecord(ctx.transactionPorts, existing);
    if (!cleaned.ok) return err(leftoversRemain(req, cleaned.error.message));
  }
  // Waiting for the container's lock or a teardown may outlast the runtime's patience.
  const left = givenUp(call);
  if (left) return err(left);
  const prepared = await prepare(call);
  if (!prepared.ok) return prepared;
  return attachAll(call, prepared.value);
}

/** Plans and validates everything before touching anything (a bad request leaves nothing), and reserves room. */
async function prepare(call: AddCall): Promise<Result<AttachmentStep[]>> {
  const { ctx, req } = call;
  const planned = planOf(call);
  if (!planned.ok) return planned;
  const withDevices = await assignDevices(planned.value, podIdentityOf(req), ctx.devices);
  if (!withDevices.ok) return withDevices;
  const steps = withDevices.value;
  const netnsProblem = ctx.podNetnsProblem(req.netns);
  if (netnsProblem) return err(netnsProblem);
  // Names taken in the netns: checked here only when some driver's create would not refuse them (taken-names.ts).
  if (namesCheckedFirst(steps.map((s) => s.driver.type))) {
    const free = await refuseTakenNames(
      ctx.kernel,
      req.netns,
      steps.map((s) => s.planned.ifname),
    );
    if (!free.ok) return free;
  }
  const full = await ctx.quota.reserve(steps.length);
  return full ? err(full) : ok(steps);
}

/**
 * A failure of an ADD that left taken names to the kernel, once wholly rolled back: the taken-name error if the netns
 * has a planned name (another's: every link of this ADD is gone), as the check before would have said.
 */
async function namedIfTaken(
  { ctx, req }: AddCall,
  steps: readonly AttachmentStep[],
  failure: CniError,
): Promise<CniError> {
  if (namesCheckedFirst(steps.map((s) => s.driver.type))) return failure;
  return takenNameOr(
    ctx.kernel,
    req.netns,
    steps.map((s) => s.planned.ifname),
    failure,
  );
}

/** Runs the planned steps in one new record, which holds the quota's reservation from here (its undo gives it back). */
async function attachAll(call: AddCall, steps: AttachmentStep[]): Promise<Result<CniResult>> {
  const { ctx, req } = call;
  const meta = {
    containerId: req.containerId,
    ifname: req.ifname,
    netns: req.netns,
    pod: steps[0]!.request.pod,
    cniNetwork: req.networkName,
    networks: steps.map((s) => s.planned.network.key),
    startedAt: new Date().toISOString(),
  };
  const tx = await Transaction.begin(ctx.transactionPorts, meta).catch((e: unknown) => {
    ctx.quota.release(steps.length);
    throw e;
  });
  try {
    const attached = await attachInTransaction(call, tx, steps);
    if (attached.ok) return attached;
    const undone = await tx.rollback();
    const failure = undone.ok ? await namedIfTaken(call, steps, attached.error) : attached.error;
    return err(afterRollback(call, failure, undone));
  } catch (e) {
    await tx.close().catch(() => undefined);
    return err(afterRollback(call, unexpected(req, e), await tx.rollback()));
  }
}

async function attachInTransaction(
  call: AddCall,
  tx: Transaction,
  steps: readonly AttachmentStep[],
): Promise<Result<CniResult>> {
  const { ctx, req, claimed, signal } = call;
  // Attachments run one after another, in plan order (NPWG); the first failure undoes them all, and so does a
  // runtime that gave up meanwhile (checked between attachments, and before the commit).
  const attachments: NetworkAttachment[] = [];
  for (const step of steps) {
    const left = givenUp(call);
    if (left) return err(left);
    const attached = await attachStep(ctx, { tx, step, signal });
    if (!attached.ok) return err(givenUp(call) ?? attached.error);
    attachments.push(attached.value);
  }
  const routed = await applyDefaultRoute(ctx.kernel, req.netns, steps, attachments);
  if (!routed.ok) return routed;
  const left = givenUp(call);
  if (left) return err(left);
  const final = routed.value;
  const result = mergeResults(final.map((a) => a.result));
  const status = networkStatus(final);
  await tx.commit(result, req.version, { attachments: final, networkStatus: status });
  await tx.close();
  ctx.report((sink) => sink.attached(steps[0]!.request.pod, req.containerId, status, addedInterfaces(final)));
  reportClaims(ctx, steps[0]!.request.pod, claimedOutcomes(claimed, final));
  return ok(result);
}

/**
 * Why a repeated ADD of a committed container and interface is not a retry of the one that made it: it names another
 * runtime network, or its plan (networks and interface names) is another than the record's. The spec allows one ADD
 * per CNI_CONTAINERID and CNI_IFNAME until DEL; only a retry gets the stored answer. A plan that cannot be made now (a
 * network deleted since) cannot be compared: the record's answer stands.
 */
function otherAttachments(call: AddCall, record: AttachmentRecord): CniError | undefined {
  const { req } = call;
  const recorded = record.details?.attachments.map((a) => `${a.network} as ${a.ifname}`) ?? record.meta.networks;
  let asked: string[] | undefined;
  if (req.networkName !== record.meta.cniNetwork) asked = [`runtime network ${req.networkName}`];
  else {
    const planned = planOf(call);
    if (!planned.ok) return undefined;
    const steps = planned.value.map((s) => `${s.planned.network.key} as ${s.planned.ifname}`);
    const mapped = record.details ? steps : planned.value.map((s) => s.planned.network.key);
    if (mapped.length !== recorded.length || mapped.some((x) => !recorded.includes(x))) asked = steps;
  }
  return asked ? repeatedAddDiffers(req, record, recorded, asked) : undefined;
}
