/**
 * A claimed device the node does not offer as its prepared-claim record says (src/dra/record-checks.ts marks it): it
 * is never moved into a pod. The pod's ADD, or the change of a running pod that would add its network, is refused
 * before anything is made, naming the claim, the device and why, so that the operator can fix the resources file or
 * the claim; the error reaches the pod's event and the claim's status as any failed ADD does.
 */
import { CniCode, CniError } from '../../cni/errors';
import type { ClaimedNetworkDevice } from './ports';

const notOfferedError = (device: ClaimedNetworkDevice, why: string): CniError => {
  const { namespace, name, uid } = device.claim;
  return new CniError(
    CniCode.InvalidEnvironment,
    `device ${device.device} of ResourceClaim ${namespace}/${name} (${uid}) is not one this node offers: its prepared record is not acted on`,
    `${why}; put the device back in its pool of the resources file (--device-plugin-config), or delete the claim`,
  );
};

/** The refusal for the first claimed device the node does not offer, if any. */
export function claimedNotOffered(devices: readonly ClaimedNetworkDevice[]): CniError | undefined {
  const device = devices.find((d) => d.notOffered !== undefined);
  return device?.notOffered === undefined ? undefined : notOfferedError(device, device.notOffered);
}
