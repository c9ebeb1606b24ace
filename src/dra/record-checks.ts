/**
 * A prepared-claim record checked against the resources file as it is now, before plexusd acts on it (moves its
 * device into a pod, serves or removes its memif socket, answers a repeated Prepare): the record is a file that may
 * have been damaged or written by hand, and the operator may have taken the device out of its pool since Prepare.
 * A device the node does not offer as the record says is never acted on; the engine refuses the pod's ADD, naming
 * the claim and the device (src/engine/claims/unoffered.ts).
 */
import type { NetworkClaimedDevices } from './claimed-devices';
import type { DraInventory } from './devices';
import { memifSocketProblem } from './memif-sockets';
import type { PreparedClaim, PreparedClaims, RecordedNetworkDevice } from './prepared-claims';

type RecordedDevice = Pick<
  PreparedClaim['devices'][number],
  'pool' | 'device' | 'kind' | 'resourceName' | 'deviceID' | 'socket'
>;

/** Why the node does not offer a recorded device as its record says; undefined when it does. */
export function recordedDeviceProblem(inventory: DraInventory, d: RecordedDevice): string | undefined {
  const offered = inventory.find(d.pool, d.device);
  if (!offered) return `pool ${d.pool} has no device ${d.device} in the resources file`;
  if (offered.kind !== d.kind || offered.resourceName !== d.resourceName || offered.deviceID !== d.deviceID) {
    const now = `${offered.kind} ${offered.deviceID} of ${offered.resourceName}`;
    return `the record says ${d.kind} ${d.deviceID} of ${d.resourceName}, the resources file ${now}`;
  }
  if (d.socket === undefined) return undefined;
  const dir = inventory.memifDir(d.resourceName, d.deviceID);
  return dir ? memifSocketProblem(d.socket, dir) : `resource ${d.resourceName} has no socketDir`;
}

/** Each device of the record that the node does not offer as recorded, with why ("pool/device: why"). */
export const recordProblems = (inventory: DraInventory, record: PreparedClaim): string[] =>
  record.devices.flatMap((d) => {
    const why = recordedDeviceProblem(inventory, d);
    return why ? [`${d.pool}/${d.device}: ${why}`] : [];
  });

/** The prepared claims as the engine reads them at ADD: each device that does not fit carries why (notOffered). */
export function checkedClaims(prepared: PreparedClaims, inventory: DraInventory): NetworkClaimedDevices {
  const checked = (d: RecordedNetworkDevice): RecordedNetworkDevice => {
    const why = recordedDeviceProblem(inventory, d);
    return why ? { ...d, notOffered: why } : d;
  };
  return {
    forPod: (podUid, named) => prepared.forPod(podUid, named).map(checked),
    forNetwork: (podUid, network, nadResourceName) => {
      const device = prepared.forNetwork(podUid, network, nadResourceName);
      return device && checked(device);
    },
  };
}
