/**
 * A pod interface name its netns already has is an error, not something to replace or delete (CNI spec): another
 * plugin's interface, or another sandbox's when CNI_NETNS points there.
 *
 * Most attachments leave the check to the kernel: their pod interface is made by one request that names it in the
 * pod's netns (a veth peer born there, a macvlan or ipvlan created there), which fails with EEXIST having made
 * nothing, and their undo deletes no pod link it did not make (a host veth by its attachment's name, a pod link only
 * if it carries the attachment's mark). A link dump of the netns before every ADD would cost more than a tenth of
 * the ADD (its own trip to the kernel thread and a socket opened in the netns), so it is made only when some planned
 * driver is not of that kind (a delegated plugin, a tap, a moved host device), before anything is recorded or made;
 * otherwise only after a failed ADD has been rolled back, to give the error the check would have given.
 */
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { kernelError } from '../drivers/driver';
import type { KernelPort } from '../kernel/kernel';

const nameTaken = (netns: string, taken: readonly string[]): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `interface ${taken.join(', ')} already exists in ${netns}`,
    'another plugin or sandbox made it: ask for another interface name ("@name" or "interface" in the selection), ' +
      'or remove what holds it',
  );

/** Driver types whose pod interface creation is the check (see above). */
const CREATE_REFUSES_TAKEN_NAMES: ReadonlySet<string> = new Set(['bridge', 'ptp', 'vxlan', 'macvlan', 'ipvlan']);

/** Whether the names of attachments run by these driver types must be checked before anything is made. */
export const namesCheckedFirst = (driverTypes: readonly string[]): boolean =>
  driverTypes.some((type) => !CREATE_REFUSES_TAKEN_NAMES.has(type));

/** The planned pod interfaces that `netns` already has. */
async function takenNames(kernel: KernelPort, netns: string, ifnames: readonly string[]): Promise<Result<string[]>> {
  const listed = await kernel.batch(netns, [{ op: 'linkList' }]);
  if (!listed.ok) return err(kernelError(listed.error, `listing the interfaces of ${netns}`));
  const present = new Set(listed.value[0].map((l) => l.name));
  return ok(ifnames.filter((name) => present.has(name)));
}

/** Fails naming every planned pod interface that `netns` already has. */
export async function refuseTakenNames(
  kernel: KernelPort,
  netns: string,
  ifnames: readonly string[],
): Promise<Result<void>> {
  const taken = await takenNames(kernel, netns, ifnames);
  if (!taken.ok) return taken;
  return taken.value.length ? err(nameTaken(netns, taken.value)) : ok(undefined);
}

/**
 * The error of an ADD that left its names to the kernel and failed (already rolled back, so every planned name the
 * netns has now is another's): the taken-name error the check first would have given, or else the failure itself.
 */
export async function takenNameOr(
  kernel: KernelPort,
  netns: string,
  ifnames: readonly string[],
  failure: CniError,
): Promise<CniError> {
  const taken = await takenNames(kernel, netns, ifnames);
  return taken.ok && taken.value.length ? nameTaken(netns, taken.value) : failure;
}
