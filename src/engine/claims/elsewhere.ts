/**
 * A claim two pods share (spec.resourceClaims naming one ResourceClaim): its network device can be in one network
 * namespace only. The pod whose ADD comes second is refused before anything is made, with the pod that has the device
 * named; the journal's committed attachments say where each claimed device is.
 */
import { CniCode, CniError } from '../../cni/errors';
import type { PodIdentity } from '../../cni/types';
import type { ClaimedNetworkDevice } from './ports';
import type { AttachmentRecord } from '../journal';

const podName = (pod: PodIdentity): string => `${pod.namespace ?? '?'}/${pod.name ?? '?'}`;

const inOtherPod = (device: ClaimedNetworkDevice, holder: AttachmentRecord, network: string): CniError => {
  const claim = `ResourceClaim ${device.claim.namespace}/${device.claim.name}`;
  const where = `pod ${podName(holder.meta.pod)} (network ${network})`;
  return holder.deleting
    ? new CniError(
        CniCode.TryAgainLater,
        `device ${device.device} of ${claim} is still in ${where}, which is being deleted`,
        'the runtime retries the sandbox; the device is free once that pod is gone',
      )
    : new CniError(
        CniCode.InvalidEnvironment,
        `device ${device.device} of ${claim} is already in ${where}: a network device can be in one pod only`,
        `the claim is shared by several pods; give each pod its own claim (a ResourceClaimTemplate), or delete pod ${podName(holder.meta.pod)}`,
      );
};

/** Why a pod (by UID) cannot have its claimed devices: one is in another pod's committed attachment. */
export function claimedElsewhere(
  devices: readonly ClaimedNetworkDevice[],
  podUid: string | undefined,
  records: readonly AttachmentRecord[],
): CniError | undefined {
  for (const device of devices) {
    for (const record of records) {
      if (podUid !== undefined && record.meta.pod.uid === podUid) continue;
      const holding = record.details?.attachments.find(
        (a) => a.kubeletDevice?.resourceName === device.resourceName && a.kubeletDevice.deviceID === device.deviceID,
      );
      if (holding) return inOtherPod(device, record, holding.network);
    }
  }
  return undefined;
}
