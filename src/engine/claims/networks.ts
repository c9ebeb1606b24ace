/**
 * A pod's DRA-claimed network devices in its plan. A claim whose config names a network gives the pod that network,
 * with the claimed device as the network's device: it joins the networks the annotation selects (as one more
 * selection, after them), or, when the annotation selects that network too, it is that selection's device. A claim
 * naming no network gives its device to a network whose NAD names its resource (k8s.v1.cni.cncf.io/resourceName), as
 * Multus 4.3 matches them. Pure: the engine supplies the devices (ClaimedDevices) and applies what comes out.
 */
import type { NetworkSelection } from '../../networks/selection';
import type { ClaimedDeviceOutcome, ClaimedNetworkDevice } from './ports';
import type { AttachmentStep } from '../attachment-step';
import type { NetworkAttachment } from '../journal';
import { definedFields } from '../../common/defined-fields';

const sameNetwork = (sel: NetworkSelection, d: ClaimedNetworkDevice): boolean =>
  d.network !== undefined && sel.namespace === d.network.namespace && sel.name === d.network.name;

/** The selections with the claimed networks in them, and which selection carries which device. */
export function withClaimedSelections(
  selections: readonly NetworkSelection[],
  devices: readonly ClaimedNetworkDevice[],
): { readonly selections: NetworkSelection[]; readonly deviceOf: ReadonlyMap<NetworkSelection, ClaimedNetworkDevice> } {
  const out = [...selections];
  const deviceOf = new Map<NetworkSelection, ClaimedNetworkDevice>();
  for (const device of devices) {
    if (!device.network) continue;
    const at = out.findIndex((sel) => sameNetwork(sel, device) && !deviceOf.has(sel));
    const fromClaim = definedFields({ interface: device.interfaceName, ips: device.ips, mac: device.mac });
    // What the annotation says of its own selection wins over the claim's config.
    const merged: NetworkSelection =
      at >= 0
        ? { ...fromClaim, ...out[at]! }
        : { namespace: device.network.namespace, name: device.network.name, ...fromClaim, index: out.length };
    if (at >= 0) out[at] = merged;
    else out.push(merged);
    deviceOf.set(merged, device);
  }
  return { selections: out, deviceOf };
}

/** The NAD annotation naming the resource a network's device comes from (NPWG). */
const RESOURCE_NAME = 'k8s.v1.cni.cncf.io/resourceName';

/**
 * The steps with their claimed devices: the device of a claimed selection, or for a network naming a resource, a
 * claimed device of that resource whose claim names no network. Such a step takes no device from the kubelet.
 */
export function withClaimedNetworkDevices(
  steps: readonly AttachmentStep[],
  devices: readonly ClaimedNetworkDevice[],
  deviceOf: ReadonlyMap<NetworkSelection, ClaimedNetworkDevice>,
): AttachmentStep[] {
  const unnamed = devices.filter((d) => d.network === undefined);
  return steps.map((step) => {
    const selection = step.planned.selection;
    let device = selection ? deviceOf.get(selection) : undefined;
    const resource = step.planned.network.annotations[RESOURCE_NAME];
    if (!device && resource && !step.request.options?.deviceID) {
      const at = unnamed.findIndex((d) => d.resourceName === resource);
      if (at >= 0) device = unnamed.splice(at, 1)[0];
    }
    if (!device) return step;
    const kubeletDevice = { resourceName: device.resourceName, deviceID: device.deviceID };
    const options = { ...step.request.options, deviceID: device.deviceID, kubeletDevice };
    return { ...step, request: { ...step.request, options }, claimed: device };
  });
}

/**
 * What each of the pod's claimed devices became, from its committed attachments: the one that holds the device (the
 * journal keeps each attachment's device) is its interface, with the addresses its result gives it.
 */
export function claimedOutcomes(
  devices: readonly ClaimedNetworkDevice[],
  attachments: readonly NetworkAttachment[],
): ClaimedDeviceOutcome[] {
  return devices.map((device) => {
    const attachment = attachments.find(
      (a) => a.kubeletDevice?.resourceName === device.resourceName && a.kubeletDevice.deviceID === device.deviceID,
    );
    if (!attachment)
      return {
        device,
        error: 'no network of the pod took this device (its claim names none, and no NAD names its resource)',
      };
    const { ifname, result } = attachment;
    const index = result.interfaces.findIndex(
      (i) => i.name === ifname && (i.sandbox !== undefined || i.socketPath !== undefined),
    );
    const iface = index >= 0 ? result.interfaces[index] : undefined;
    const ips = result.ips
      .filter((ip) => index < 0 || ip.interface === undefined || ip.interface === index)
      .map((ip) => ip.address);
    return { device, attached: { interfaceName: ifname, ips, ...(iface?.mac ? { mac: iface.mac } : {}) } };
  });
}

/** Every claimed device of a failed transaction: the error. */
export const failedOutcomes = (devices: readonly ClaimedNetworkDevice[], error: string): ClaimedDeviceOutcome[] =>
  devices.map((device) => ({ device, error }));
