/**
 * A pod interface name its netns already has is an error, not something to replace or delete (CNI spec): another
 * plugin's interface, or another sandbox's when CNI_NETNS points there. Checked once the plan is known and before
 * anything is recorded or made, so the ADD fails having touched nothing.
 */
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { kernelError } from '../drivers/driver';
import type { KernelPort } from '../kernel/kernel';

const nameTaken = (netns: string, taken: readonly string[]): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `interface ${taken.join(', ')} already exists in ${netns}`,
    'another plugin or sandbox made it: ask for another interface name ("@name" or "interface" in the selection), '
      + 'or remove what holds it',
  );

/** Fails naming every planned pod interface that `netns` already has. */
export async function refuseTakenNames(
  kernel: KernelPort,
  netns: string,
  ifnames: readonly string[],
): Promise<Result<void>> {
  const listed = await kernel.batch(netns, [{ op: 'linkList' }]);
  if (!listed.ok) return err(kernelError(listed.error, `listing the interfaces of ${netns}`));
  const present = new Set(listed.value[0].map((l) => l.name));
  const taken = ifnames.filter((name) => present.has(name));
  return taken.length ? err(nameTaken(netns, taken)) : ok(undefined);
}
