/**
 * GC: removes the attachments the runtime no longer lists (or, for plexusctl and the orphan sweep, those a predicate
 * names stale), each undone whole under its container's lock; then releases leases no record holds and lets drivers
 * that keep state of their own GC it.
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import type { CniRequest } from '../../cni/request';
import { delegationForced } from '../../networks/planner';
import type { EngineContext, SweepMode, SweepReport, SweptAttachment } from '../context';
import type { AdoptedSandbox } from '../foreign-sandboxes';
import type { AttachmentRecord } from '../journal';
import { releaseOrphanedLeases } from '../orphaned-leases';
import { undoRecord } from '../transaction';
import { adoptedDel } from './del';

type GcRequest = Extract<CniRequest, { command: 'GC' }>;
type Stale = (record: AttachmentRecord) => string | undefined;
type Swept = SweptAttachment | { readonly error: string; readonly reason: string } | undefined;

const keyOf = (containerId: string, ifname: string): string => `${containerId}\u0000${ifname}`;

/** GC: removes every attachment of this runtime network that the runtime no longer lists, then orphaned leases. */
export async function gc(ctx: EngineContext, req: GcRequest): Promise<Result<void>> {
  const valid = new Set(req.validAttachments.map((a) => keyOf(a.containerId, a.ifname)));
  const stale: Stale = (r) =>
    r.meta.cniNetwork !== req.networkName || valid.has(keyOf(r.meta.containerId, r.meta.ifname))
      ? undefined
      : 'not listed by the runtime';
  const swept = await sweep(ctx, stale, { dryRun: false });
  const failures = swept.failures.map((f) => f.error);
  for (const s of adoptedStale(ctx, req, valid)) {
    const r = await ctx.locks.run(s.containerId, async () => ctx.foreign?.del(adoptedDel(s)));
    if (r?.kind === 'done' && !r.result.ok) failures.push(r.result.error.message);
  }
  if (!failures.length) return ok(undefined);
  const what = `GC could not remove ${failures.length} attachment(s)`;
  return err(new CniError(CniCode.Internal, what, failures.join('; ')));
}

/**
 * Sandboxes Multus made that the runtime no longer lists, made under this GC's network name: they go as Multus would
 * remove them. Like Plexus's own attachments, one made under another name (or whose name no record tells) is kept.
 */
function adoptedStale(ctx: EngineContext, req: GcRequest, valid: ReadonlySet<string>): AdoptedSandbox[] {
  const foreign = ctx.foreign;
  if (!foreign) return [];
  return foreign
    .list()
    .filter((a) => !valid.has(keyOf(a.containerId, a.networks[0]?.ifname ?? '')))
    .filter((a) => foreign.madeUnder(a, req.networkName));
}

/** Removes a listed attachment if `stale` still names it under its container's lock (an ADD or DEL raced in wins). */
function sweepOne(ctx: EngineContext, listed: AttachmentRecord, stale: Stale, dryRun: boolean): Promise<Swept> {
  const { containerId, ifname } = listed.meta;
  return ctx.locks.run(containerId, async (): Promise<Swept> => {
    const record = await ctx.transactionPorts.journal.load(containerId, ifname);
    const reason = record && stale(record);
    if (!record || !reason) return undefined;
    if (dryRun) return { containerId, ifname, reason };
    // Being torn down in the background already: it goes without another undo.
    if (ctx.teardown?.pending(containerId, ifname)) return { containerId, ifname, reason };
    const r = await undoRecord(ctx.transactionPorts, record);
    return r.ok ? { containerId, ifname, reason } : { reason, error: r.error.message };
  });
}

/**
 * Removes every attachment `stale` gives a reason for (the reason is asked again under the container's lock,
 * so an ADD or DEL that raced in wins), then releases leases without an attachment and lets delegated plugins
 * GC their own state. With `dryRun`, only says what it would remove.
 */
export async function sweep(ctx: EngineContext, stale: Stale, { dryRun }: SweepMode): Promise<SweepReport> {
  const removed: SweptAttachment[] = [];
  const failures: (SweptAttachment & { readonly error: string })[] = [];
  let kept = 0;
  for (const listed of await ctx.transactionPorts.journal.list()) {
    const { containerId, ifname } = listed.meta;
    const outcome = stale(listed) ? await sweepOne(ctx, listed, stale, dryRun) : undefined;
    if (!outcome) kept++;
    else if ('error' in outcome) failures.push({ containerId, ifname, reason: outcome.reason, error: outcome.error });
    else {
      removed.push(outcome);
      if (!dryRun) ctx.log.info({ containerId, ifname, reason: outcome.reason }, 'GC removed a stale attachment');
    }
  }
  // A dry run changed nothing, so the leases it lists are exactly those a real GC releases after its removals
  // (a removed attachment's own leases go with its undo steps, not as orphans).
  const leases = await releaseOrphanedLeases({ ...ctx, journal: ctx.transactionPorts.journal }, dryRun);
  if (dryRun) return { removed, kept, failures, leases, leasesReleased: 0, dryRun };
  if (leases.length) {
    const released = leases.map((l) => `${l.network}/${l.address} (${l.containerId || 'no owner'} ${l.ifname})`);
    ctx.log.info({ released }, 'GC released leases without an attachment');
  }
  for (const error of await gcDriverState(ctx)) {
    failures.push({ containerId: '', ifname: '', reason: 'driver GC', error });
  }
  return { removed, kept, failures, leases, leasesReleased: leases.length, dryRun };
}

/**
 * Drivers that keep state of their own (delegated plugins: host-local leases, for one) get a GC for each network
 * they run, listing the attachments Plexus still has on it there, so they can drop the rest.
 */
async function gcDriverState(ctx: EngineContext): Promise<string[]> {
  const records = await ctx.transactionPorts.journal.list();
  // Read once per GC: listing them reads Multus's cache files.
  const adopted = ctx.foreign?.list() ?? [];
  const failures: string[] = [];
  for (const network of ctx.networks.list().networks) {
    const driver = ctx.drivers.for(network, delegationForced(network));
    if (!driver.gc) continue;
    const live = records.flatMap((r) =>
      (r.details?.attachments ?? [])
        .filter((a) => a.network === network.key && a.driver === driver.type)
        .map((a) => ({ containerId: r.meta.containerId, ifname: a.ifname })),
    );
    // Sandboxes Multus made still hold what their plugins gave them on this network.
    for (const s of adopted) {
      const held = s.networks.filter((n) => n.name === network.cniName);
      for (const n of held) live.push({ containerId: s.containerId, ifname: n.ifname });
    }
    const r = await driver.gc(network, live, ctx.settings.cniBinDir);
    if (!r.ok) failures.push(r.error.message);
  }
  return failures;
}
