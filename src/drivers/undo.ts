/**
 * Undo steps: running them (the generic kinds here, the kinds a driver owns in that driver), describing them, and the
 * order they are undone in. Each one tolerates what is already gone, so DEL and recovery can repeat them safely.
 */
import { kernelError } from './common/kernel-error';
import { CniCode, CniError, Result, err, ok } from '../cni/errors';
import type { UndoEnv, UndoHandlers, UndoStep } from './driver';
import type { KernelCallError } from '../kernel/kernel';

/** A pod netns that no longer exists took its links with it. */
const netnsGone = (netns: string | undefined, e: KernelCallError): boolean =>
  netns !== undefined && e.failure.op === 'open netns' && e.is('ENOENT');

/** The step kinds every driver may record. */
export const genericUndo: UndoHandlers = {
  deleteLink: async (step, { kernel }) => {
    // Plexus never makes a loopback: a step naming lo (an older plexusd let a pod ask for it) has nothing to undo.
    if (step.name === 'lo') return ok(undefined);
    if (step.mark !== undefined) {
      const found = await kernel.getLink(step.netns, step.name);
      if (!found.ok) return netnsGone(step.netns, found.error) ? ok(undefined) : err(kernelError(found.error));
      // Gone, or not the link Plexus made for this attachment (another plugin's, another pod's): nothing of ours.
      if (found.value?.group !== step.mark) return ok(undefined);
    }
    const r = await kernel.deleteLink(step.netns, step.name);
    if (!r.ok && !netnsGone(step.netns, r.error)) return err(kernelError(r.error));
    return ok(undefined);
  },
  releaseIpam: async (step, { ipam }) => {
    const r = await ipam.release(step.network, step.containerId, step.ifname);
    return r.ok ? ok(undefined) : r;
  },
  deleteRoute: async (step, { kernel }) => {
    const r = await kernel.batch(step.netns, [{ op: 'routeDel', route: step.route, ignore: ['ESRCH', 'ENODEV', 'ENOENT'] }]);
    if (!r.ok && !(step.netns && r.error.failure.op === 'open netns')) return err(kernelError(r.error));
    return ok(undefined);
  },
};

/** A runner for every step kind the handlers know; a kind none knows is an error (a journal from another build). */
export function undoRunner(handlers: readonly UndoHandlers[]): (step: UndoStep, env: UndoEnv) => Promise<Result<void, CniError>> {
  const byKind = new Map<string, (step: never, env: UndoEnv) => Promise<Result<void>>>();
  for (const h of handlers) for (const [kind, run] of Object.entries(h)) if (run) byKind.set(kind, run as (step: never, env: UndoEnv) => Promise<Result<void>>);
  return async (step, env) => {
    const run = byKind.get(step.kind);
    if (!run) return err(new CniError(CniCode.Internal, `no driver of this plexusd can undo a step of kind ${JSON.stringify(step.kind)}`));
    return run(step as never, env);
  };
}

export const describeUndo = (step: UndoStep): string => {
  switch (step.kind) {
    case 'deleteLink':
      return `delete link ${step.name}${step.netns ? ` in ${step.netns}` : ' on the host'}`;
    case 'releaseIpam':
      return `release IPs of ${step.containerId}/${step.ifname} in network ${step.network}`;
    case 'deleteRoute':
      return `delete route ${step.route.dst}${step.route.gw ? ` via ${step.route.gw}` : ''}`;
    case 'returnLink':
      return `return ${step.name} from ${step.netns} to the host as ${step.hostName}`;
    case 'delegateDel':
      return `DEL via ${step.plugin} for ${step.env.containerId}/${step.env.ifname}`;
    case 'deleteSwitchPort':
      return `remove port ${step.port} from switch bridge ${step.bridge}`;
    case 'removeSocketDir':
      return `remove socket directory ${step.path}`;
  }
};

/**
 * The order to undo recorded steps in: stages run one after another, the steps of a stage together. Everything
 * is undone in reverse, except that addresses are released last, once every interface that held one is gone;
 * and link deletions that follow one another form one stage, since each waits for the kernel's RCU grace
 * periods (host links are then deleted in one request): a pod with three interfaces waits once, not three times.
 */
export function undoStages(recorded: readonly UndoStep[]): UndoStep[][] {
  const reversed = [...recorded].reverse();
  const stages: UndoStep[][] = [];
  for (const step of reversed.filter((s) => s.kind !== 'releaseIpam')) {
    const last = stages[stages.length - 1];
    if (step.kind === 'deleteLink' && last?.every((s) => s.kind === 'deleteLink')) last.push(step);
    else stages.push([step]);
  }
  for (const step of reversed.filter((s) => s.kind === 'releaseIpam')) stages.push([step]);
  return stages;
}
