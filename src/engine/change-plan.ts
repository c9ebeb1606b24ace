/**
 * What changing a running pod's networks means (hot-plug): its attachments now against the plan of what its
 * annotation asks for now. An attachment asked for again keeps its interface, whatever name a fresh plan would give
 * it; one no longer asked for is removed; one newly asked for is added under the name it asks for, or the next free
 * name of its prefix (net3 after net1 and net2, never a name still in use). The default network is never touched.
 * Pure: the engine runs the result as one journaled transaction.
 */
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { interfaceNameProblem } from '../cni/ifname';
import { isAuxiliaryChain } from '../networks/auxiliary-chain';
import type { PlannedAttachment } from '../networks/planner';
import { describeSelection, SELECTION_ANNOTATION } from '../networks/selection';

/** One network the pod has now. */
export interface CurrentAttachment {
  readonly network: string;
  readonly ifname: string;
  readonly isDefault: boolean;
}

export interface PodChange<S> {
  /** Attachments to add, each with the step that makes it, renamed to the interface it gets. */
  readonly add: readonly { readonly step: S; readonly ifname: string }[];
  readonly remove: readonly CurrentAttachment[];
  /** What stays as it is (the default network included). */
  readonly keep: readonly CurrentAttachment[];
}

const invalid = (message: string, details = ''): Result<never> =>
  err(new CniError(CniCode.InvalidNetworkConfig, message, details));

/**
 * `wanted`: the plan of the pod's secondary networks now (no default network), each with its step; `planned(step)`
 * reads the planned attachment of a step.
 */
export function planChange<S>(
  current: readonly CurrentAttachment[],
  wanted: readonly S[],
  planned: (step: S) => PlannedAttachment,
): Result<PodChange<S>> {
  // The default network and the auxiliary chain are not the annotation's: a change never touches them.
  const ownedByNode = (a: CurrentAttachment): boolean => a.isDefault || isAuxiliaryChain(a.network);
  const unmatched = current.filter((a) => !ownedByNode(a));
  const keep: CurrentAttachment[] = current.filter(ownedByNode);
  const toAdd: S[] = [];
  // Explicit names first: they match only the attachment of that network under that name.
  const byExplicit = [...wanted].sort((a, b) => Number(planned(b).explicitName) - Number(planned(a).explicitName));
  for (const step of byExplicit) {
    const p = planned(step);
    const i = unmatched.findIndex((a) => a.network === p.network.key && (!p.explicitName || a.ifname === p.ifname));
    if (i < 0) toAdd.push(step);
    else keep.push(...unmatched.splice(i, 1));
  }
  const remove = unmatched;
  const inUse = new Set(current.map((a) => a.ifname));
  const add: { step: S; ifname: string }[] = [];
  for (const step of toAdd) {
    const p = planned(step);
    if (p.selection?.defaultRoute !== undefined) {
      return invalid(
        `${SELECTION_ANNOTATION}: ${describeSelection(p.selection)}: "default-route" cannot be set on a network added to a running pod`,
        'the default route is chosen when the pod starts; recreate the pod to move it',
      );
    }
    if (p.explicitName && inUse.has(p.ifname)) {
      const holder = current.find((a) => a.ifname === p.ifname);
      return invalid(
        `${p.selection ? `${SELECTION_ANNOTATION}: ${describeSelection(p.selection)}` : `network ${p.network.key}`}: interface "${p.ifname}" is still used by network ${holder?.network ?? '?'} on the running pod`,
        'networks are added before others are removed, so a failed change leaves the pod as it was: remove the old network in one change and add the new one under that name in the next',
      );
    }
  }
  // Names asked for by the additions are reserved before any is generated.
  for (const step of toAdd) if (planned(step).explicitName) inUse.add(planned(step).ifname);
  for (const step of wanted.filter((s) => toAdd.includes(s))) {
    const p = planned(step);
    let ifname = p.ifname;
    if (!p.explicitName) {
      const prefix = p.ifname.replace(/\d+$/, '');
      let n = 1;
      while (inUse.has(`${prefix}${n}`)) n++;
      ifname = `${prefix}${n}`;
      inUse.add(ifname);
      const problem = interfaceNameProblem(ifname);
      if (problem) return invalid(`network ${p.network.key}: the generated interface name "${ifname}" ${problem}`);
    }
    add.push({ step, ifname });
  }
  return ok({ add, remove, keep });
}
