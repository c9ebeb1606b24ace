/**
 * DEL: undoes the container's record: with the background teardown, what cannot wait at once, and the links and
 * leases after the answer (teardown/background.ts); without it, whole (undoRecord). A sandbox without a record is
 * another's: a stale DEL of a pod attached under another container ID is only logged; one Multus made is removed as
 * Multus would; one the node's own network made is handed to that network's plugins. DEL of what does not exist succeeds (CNI spec).
 */
import { ok, type Result } from '../../cni/errors';
import type { ContainerRequest, EngineContext } from '../context';
import type { AdoptedSandbox, ForeignDel } from '../foreign-sandboxes';
import { delByCurrentPlan, type ForeignDelDeps } from '../foreign-del';
import { forwardUnknownDel } from '../node-plugins-del';
import type { AttachmentRecord } from '../journal';
import { runUndoSteps, undoRecord } from '../transaction';
import { definedFields } from '../../common/defined-fields';

export function del(ctx: EngineContext, req: ContainerRequest): Promise<Result<void>> {
  return ctx.locks.run(req.containerId, async () => {
    const record = await ctx.transactionPorts.journal.load(req.containerId, req.ifname);
    if (!record) return delUnknown(ctx, req);
    const undone = await tearDown(ctx, record);
    if (undone.ok) ctx.report((sink) => sink.detached(record.meta.pod, req.containerId));
    return undone;
  });
}

/**
 * Tears a record down: in the background when the engine has one (a repeated DEL of an attachment being torn down
 * answers at once), else whole before answering. GC and recovery tear down the same way.
 */
export function tearDown(ctx: EngineContext, record: AttachmentRecord): Promise<Result<void>> {
  if (!ctx.teardown) return undoRecord(ctx.transactionPorts, record);
  const what = `${record.meta.containerId}/${record.meta.ifname}`;
  return ctx.teardown.start(record, (steps) => runUndoSteps(ctx.transactionPorts.undo, steps, what));
}

/** The DEL of a sandbox Plexus has no record of (under the container's lock). */
async function delUnknown(ctx: EngineContext, req: ContainerRequest): Promise<Result<void>> {
  // The runtime repeating a DEL of what Plexus removed (containerd sends a sandbox's DEL more than once): its undo ran
  // everything, the node's plugins' DEL included. Each further step reads every record or runs a plugin.
  if (ctx.recentlyRemoved.has(req.containerId, req.ifname)) return ok(undefined);
  const { podNamespace, podName } = req.args;
  if (podNamespace && podName) {
    const records = await ctx.transactionPorts.journal.list();
    const current = records.find(
      (r) => r.meta.pod.namespace === podNamespace && r.meta.pod.name === podName && r.meta.ifname === req.ifname,
    );
    if (current) {
      const seen = { staleContainerId: req.containerId, currentContainerId: current.meta.containerId };
      const why = 'stale DEL ignored: the pod is attached under another container ID';
      ctx.log.info({ ...seen, pod: `${podNamespace}/${podName}` }, why);
    }
  }
  // A sandbox Multus made before Plexus served the node is removed as Multus would have removed it.
  const adopted = await ctx.foreign?.del(req);
  if (adopted?.kind === 'done') return adopted.result;
  if (adopted?.kind === 'unreadable') {
    const replanned = await delByCurrentPlan(req, foreignDelDeps(ctx));
    ctx.foreign?.forget(adopted.what);
    if (replanned) return replanned;
  }
  // DEL of what does not exist succeeds (CNI spec); a sandbox the node's own network made (before Plexus was
  // installed) is handed to that network's plugins, so its address is released where it was taken.
  return forwardUnknownDel(ctx, req);
}

function foreignDelDeps(ctx: EngineContext): ForeignDelDeps {
  const { settings, networks, drivers, pods, kernel, ipam, log } = ctx;
  return {
    settings,
    networks,
    drivers,
    ...definedFields({ pods }),
    cniBinDir: settings.cniBinDir,
    undoEnv: { kernel, ipam },
    log,
  };
}

/** Removes a sandbox another plugin made, as it would, without a DEL from the runtime (its pod is gone). */
export async function removeAdopted(ctx: EngineContext, sandbox: AdoptedSandbox): Promise<Result<void>> {
  const foreign = ctx.foreign;
  if (!foreign) return ok(undefined);
  const outcome = await ctx.locks.run(sandbox.containerId, () => foreign.del(adoptedDel(sandbox)));
  return outcome.kind === 'done' ? outcome.result : ok(undefined);
}

/** The DEL the runtime would have sent for an adopted sandbox whose pod is gone. */
export const adoptedDel = (sandbox: AdoptedSandbox): ForeignDel => ({
  containerId: sandbox.containerId,
  netns: '',
  ifname: sandbox.networks[0]?.ifname ?? '',
  args: { ips: [], ignoreUnknown: true, raw: [] },
});
