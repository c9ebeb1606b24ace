/**
 * Undoing a host-device attachment: the device goes back from the pod netns to the daemon's netns, under its
 * original name. Idempotent: when the pod netns or the device in it is gone, there is nothing to return.
 *
 * When a pod netns is destroyed, the kernel itself moves physical devices (NICs, SR-IOV VFs) back to the *initial*
 * netns under their pod-side name (or devN on a clash), while virtual ones such as a veth are destroyed with it.
 * So after the netns is gone a VF may be on the host under the pod-side name; this step cannot tell that device
 * from an unrelated one of the same name, so it leaves it alone.
 */
import { kernelError } from '../common/kernel-error';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { KernelCallError, KernelPort } from '../../kernel/kernel';

/**
 * `mac`: the device's MAC when it was moved; a link of that name with another MAC is not the device, and stays.
 * `up`: the device was up on the host when it was moved; moving a netdev between namespaces sets it down, so it is set
 * up again once it is back (the reference plugin leaves it down, not knowing; a device plugin that counts a device
 * healthy while it is up would lose it after its first pod). Records without it leave the device down.
 */
export interface ReturnLinkStep {
  readonly netns: string;
  readonly name: string;
  readonly hostName: string;
  readonly mac?: string;
  readonly up?: boolean;
}

const netnsGone = (step: { readonly netns: string }, e: KernelCallError): boolean =>
  (e.failure.op === 'open netns' || e.failure.op === 'setns') && e.failure.target === step.netns;

/**
 * The daemon's netns as a path the kernel worker can open. The worker runs in the daemon's netns, but
 * /proc/thread-self in the worker would be the worker's own; /proc/<pid>/ns/net is the main thread's.
 */
export const daemonNetnsPath = (): string => `/proc/${process.pid}/ns/net`;

export async function returnLinkToHost(step: ReturnLinkStep, kernel: KernelPort): Promise<Result<void>> {
  if (step.mac !== undefined) {
    const found = await kernel.getLink(step.netns, step.name);
    if (!found.ok) {
      return netnsGone(step, found.error)
        ? ok(undefined)
        : err(kernelError(found.error, `looking up ${step.name} in ${step.netns}`));
    }
    // Gone, or another interface of that name (the move never happened): not the device Plexus moved, so it stays.
    if (found.value?.mac !== step.mac) return ok(undefined);
  }
  const home = daemonNetnsPath();
  const r = await kernel.batch(step.netns, [
    { op: 'linkSet', name: step.name, netns: home, newName: step.hostName },
    ...(step.up ? [{ op: 'linkSet', name: step.hostName, up: true, at: home } as const] : []),
  ]);
  if (r.ok) return ok(undefined);
  const f = r.error.failure;
  // The pod netns is gone (or its bind mount was removed): the kernel already took the device back or destroyed it.
  if (netnsGone(step, r.error)) return ok(undefined);
  // The device is no longer in the pod netns under that name: already returned, or destroyed.
  if (f.op === 'lookup' && f.errnoName === 'ENODEV') return ok(undefined);
  if (f.errnoName === 'EEXIST') {
    return err(
      new CniError(
        CniCode.Internal,
        `cannot return ${step.name} from ${step.netns} to the host as ${step.hostName}: a link of that name already exists on the host`,
        r.error.details,
      ),
    );
  }
  return err(kernelError(r.error, `returning ${step.name} from ${step.netns} to the host as ${step.hostName}`));
}
