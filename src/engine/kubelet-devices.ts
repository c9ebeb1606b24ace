/**
 * Devices the kubelet allocated to a pod (device plugins, through its pod-resources API), handed to the attachments
 * whose network names their resource, as Multus does.
 */
import { CniCode, CniError, type Result, err, ok } from '../cni/errors';
import type { PodIdentity } from '../cni/types';
import type { AttachmentStep } from './attachment-step';

/** The NAD annotation naming the device-plugin resource a network's interface comes from (NPWG). */
export const RESOURCE_NAME_ANNOTATION = 'k8s.v1.cni.cncf.io/resourceName';

/** Which devices the kubelet allocated to a pod, per resource name (the kubelet's pod-resources API). */
export interface DeviceSource {
  devicesOf(namespace: string, name: string): Promise<Result<ReadonlyMap<string, readonly string[]>>>;
}

/**
 * Gives each attachment whose network names a resource (k8s.v1.cni.cncf.io/resourceName) a device the kubelet
 * allocated to the pod for it, as Multus does: the pod's devices of that resource are handed out in plan order, one
 * per network. A default network that already has a runtimeConfig deviceID keeps it. Asks the kubelet only when some
 * network names a resource; without a device source (no kubelet configured), the plan is left as it is.
 */
export async function assignDevices(
  steps: readonly AttachmentStep[],
  pod: PodIdentity,
  devices: DeviceSource | undefined,
  /** Devices the pod's attachments already use (a running pod's, when networks are added to it). */
  taken: readonly { readonly resourceName: string; readonly deviceID: string }[] = [],
): Promise<Result<AttachmentStep[]>> {
  const resourceOf = (s: AttachmentStep): string | undefined =>
    s.planned.network.annotations[RESOURCE_NAME_ANNOTATION] || undefined;
  // A step with a device already (the default network's runtimeConfig deviceID, a DRA-claimed one) keeps it.
  const needing = steps.filter((s) => resourceOf(s) && !s.request.options?.deviceID);
  if (!devices || needing.length === 0) return ok([...steps]);
  if (!pod.namespace || !pod.name) {
    return err(
      new CniError(
        CniCode.InvalidEnvironment,
        `network ${needing[0]!.planned.network.key} takes its device from the kubelet (${RESOURCE_NAME_ANNOTATION}), but the runtime did not name the pod (K8S_POD_NAMESPACE, K8S_POD_NAME)`,
      ),
    );
  }
  const allocated = await devices.devicesOf(pod.namespace, pod.name);
  if (!allocated.ok) return allocated;
  const used = new Map<string, number>();
  const out: AttachmentStep[] = [];
  for (const step of steps) {
    const resourceName = resourceOf(step);
    if (!resourceName || !needing.includes(step)) {
      out.push(step);
      continue;
    }
    const index = used.get(resourceName) ?? 0;
    const ids = (allocated.value.get(resourceName) ?? []).filter(
      (id) => !taken.some((t) => t.resourceName === resourceName && t.deviceID === id),
    );
    const deviceID = ids[index];
    if (deviceID === undefined) {
      const wanted = needing.filter((s) => resourceOf(s) === resourceName).length;
      const busy = taken.filter((t) => t.resourceName === resourceName).length;
      return err(
        new CniError(
          CniCode.InvalidNetworkConfig,
          `network ${step.planned.network.key} (${step.planned.ifname}) needs a device of ${resourceName} (its ${RESOURCE_NAME_ANNOTATION}), but the kubelet allocated pod ${pod.namespace}/${pod.name} ${ids.length}${busy ? ` more (${busy} in use by its networks)` : ''} for ${wanted} network(s) of that resource`,
          `request ${resourceName}: ${wanted} in a container's resources.limits`,
        ),
      );
    }
    used.set(resourceName, index + 1);
    out.push({
      ...step,
      request: {
        ...step.request,
        options: { ...step.request.options, deviceID, kubeletDevice: { resourceName, deviceID } },
      },
    });
  }
  return ok(out);
}
