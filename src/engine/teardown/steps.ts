/**
 * Which of a record's undo steps a DEL runs before it answers, and which go to the background teardown. Only kernel
 * links and routes, and the leases released once they are gone, wait: a delegated plugin's DEL, a host device given
 * back, a switch port and a socket directory are undone before the DEL answers, as they always were (a delegated
 * plugin keeps the semantics its own DEL has).
 */
import type { UndoStep } from '../../drivers/driver';

const BACKGROUND_KINDS: ReadonlySet<UndoStep['kind']> = new Set(['deleteLink', 'deleteRoute', 'releaseIpam']);

export interface TeardownSplit {
  /** Steps undone before the DEL answers, in recorded order. */
  readonly now: readonly UndoStep[];
  /** Steps undone in the background, in recorded order: links and routes, then the leases they carried. */
  readonly later: readonly UndoStep[];
}

export function splitTeardown(steps: readonly UndoStep[]): TeardownSplit {
  return {
    now: steps.filter((s) => !BACKGROUND_KINDS.has(s.kind)),
    later: steps.filter((s) => BACKGROUND_KINDS.has(s.kind)),
  };
}

/**
 * Where the background deletes a host link: in `hostNetns` (the daemon's own netns, named by a path), so that the
 * kernel's RCU wait of the deletion is spent on a pool thread (as for a link in a pod) and never holds up the kernel
 * worker that the next ADD needs. Without `hostNetns` (the in-memory kernel), the step is left as it is.
 */
export function placeForBackground(step: UndoStep, hostNetns: string | undefined): UndoStep {
  if (hostNetns === undefined || step.kind !== 'deleteLink' || step.netns !== undefined) return step;
  return { ...step, netns: hostNetns };
}
