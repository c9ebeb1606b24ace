/**
 * Undo steps: running them (the generic kinds here, the kinds a driver owns in that driver's undo.ts), describing them,
 * the order they are undone in, and reading the steps an older plexusd wrote. Each one tolerates what is already gone,
 * so DEL and recovery can repeat them safely.
 */
import { kernelError } from './common/kernel-error';
import { CniCode, CniError, type Result, err, ok } from '../cni/errors';
import type { Driver, DriverUndoStep, GenericUndoHandlers, UndoEnv, UndoStep } from './driver';
import type { KernelCallError } from '../kernel/kernel';

/** A pod netns that no longer exists took its links with it. */
const netnsGone = (netns: string | undefined, e: KernelCallError): boolean =>
  netns !== undefined && e.failure.op === 'open netns' && e.is('ENOENT');

/** The step kinds every driver may record. */
export const genericUndo: GenericUndoHandlers = {
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
    const r = await kernel.batch(step.netns, [
      { op: 'routeDel', route: step.route, ignore: ['ESRCH', 'ENODEV', 'ENOENT'] },
    ]);
    if (!r.ok && !(step.netns && r.error.failure.op === 'open netns')) return err(kernelError(r.error));
    return ok(undefined);
  },
};

type UndoOne = (step: UndoStep, env: UndoEnv) => Promise<Result<void, CniError>>;

/**
 * A runner for the generic kinds and for the steps of `drivers`; a driver, kind or version it does not know is an
 * error (a journal from another build), and so is data its driver cannot read.
 */
export function undoRunner(drivers: readonly Driver[]): UndoOne {
  const byType = new Map(drivers.map((d) => [d.type, d]));
  return async (step, env) => {
    switch (step.kind) {
      case 'deleteLink':
        return genericUndo.deleteLink(step, env);
      case 'releaseIpam':
        return genericUndo.releaseIpam(step, env);
      case 'deleteRoute':
        return genericUndo.deleteRoute(step, env);
      case 'driver':
        return runDriverStep(byType.get(step.driver), step, env);
      default:
        return err(unknownKind((step as { kind: unknown }).kind));
    }
  };
}

async function runDriverStep(driver: Driver | undefined, step: DriverUndoStep, env: UndoEnv): Promise<Result<void>> {
  const kind = driver?.undo?.[step.step];
  if (!kind) return err(unknownKind(`${step.driver}/${step.step}`));
  const read = kind.read(step.data, step.v);
  if (!read.ok) return err(read.error.withContext(`undo step ${step.driver}/${step.step} v${step.v}`));
  return kind.run(read.value, env);
}

const unknownKind = (kind: unknown): CniError =>
  new CniError(CniCode.Internal, `no driver of this plexusd can undo a step of kind ${JSON.stringify(kind)}`);

/**
 * The step kinds a plexusd wrote in shapes of their own before driver steps were opaque (journal v0 and v1 lines), and
 * the driver kind each is now: read as version 0 of that kind, with the same fields.
 */
const LEGACY_KINDS: Readonly<Record<string, { readonly driver: string; readonly step: string }>> = {
  returnLink: { driver: 'host-device', step: 'returnLink' },
  delegateDel: { driver: 'delegate', step: 'delegateDel' },
  deleteSwitchPort: { driver: 'memif', step: 'deleteSwitchPort' },
  removeSocketDir: { driver: 'memif', step: 'removeSocketDir' },
};

export const LEGACY_STEP_KINDS: readonly string[] = Object.keys(LEGACY_KINDS);

/** A step as recorded, in today's form: a legacy driver step becomes its driver's (v 0); any other is kept as it is. */
export function upgradeStep(recorded: { readonly kind: string }): UndoStep {
  const owner = LEGACY_KINDS[recorded.kind];
  if (!owner) return recorded as UndoStep;
  const { kind: _kind, ...data } = recorded;
  return { kind: 'driver', driver: owner.driver, step: owner.step, v: 0, data };
}

/** What a step undoes, for error messages; a driver step names its driver and kind (the driver's errors say more). */
export const describeUndo = (step: UndoStep): string => {
  switch (step.kind) {
    case 'deleteLink':
      return `delete link ${step.name}${step.netns ? ` in ${step.netns}` : ' on the host'}`;
    case 'releaseIpam':
      return `release IPs of ${step.containerId}/${step.ifname} in network ${step.network}`;
    case 'deleteRoute':
      return `delete route ${step.route.dst}${step.route.gw ? ` via ${step.route.gw}` : ''}`;
    case 'driver':
      return `${step.step} of the ${step.driver} driver`;
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
