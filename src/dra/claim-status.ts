/**
 * A claim's status.devices[] (KEP-4817): for each plexus.io device, the network interface it became in the pod
 * (networkData: interface name, addresses, MAC) and a Ready condition, or Ready=False with the attach error. Written by
 * server-side apply on the status subresource under plexusd's own field manager, so entries of other drivers are left
 * alone and a device left out of the next apply loses its entry. Written by ClaimStatusSink (claim-status-sink.ts)
 * once the pod's interfaces exist; nothing in DRA's Prepare path needs it.
 */
import { segment, type ApiFailure, type KubeApiClient } from '../k8s/api-client';
import { err, ok, type Result } from '../common/result';
import { DRIVER_NAME } from './api';

export const CLAIM_STATUS_MANAGER = 'plexusd-dra';

export interface DeviceNetworkStatus {
  readonly pool: string;
  readonly device: string;
  /** Absent with `error`: the attach failed. */
  readonly network?: { readonly interfaceName: string; readonly ips: readonly string[]; readonly mac?: string };
  readonly error?: string;
}

/** The status.devices[] entry for one device (a pure function: what gets applied). */
export function deviceStatusEntry(d: DeviceNetworkStatus, now: Date): Record<string, unknown> {
  const ready = d.error === undefined;
  const condition = {
    type: 'Ready', status: ready ? 'True' : 'False', lastTransitionTime: now.toISOString().replace(/\.\d+Z$/, 'Z'),
    reason: ready ? 'NetworkReady' : 'NetworkAttachFailed',
    message: ready ? `interface ${d.network?.interfaceName ?? ''} is in the pod` : (d.error ?? '').slice(0, 32768),
  };
  return {
    driver: DRIVER_NAME, pool: d.pool, device: d.device, conditions: [condition],
    ...(ready && d.network ? { networkData: networkData(d.network) } : {}),
  };
}

function networkData(n: NonNullable<DeviceNetworkStatus['network']>): Record<string, unknown> {
  return { interfaceName: n.interfaceName, ips: [...n.ips], ...(n.mac ? { hardwareAddress: n.mac } : {}) };
}

/** Applies the entries of these devices to the claim's status (an empty list removes plexusd's entries). */
export async function applyClaimDeviceStatus(
  api: KubeApiClient, claim: { namespace: string; name: string }, devices: readonly DeviceNetworkStatus[], now = new Date(),
): Promise<Result<void, string>> {
  const r = await applyClaimStatus(api, claim, devices, now);
  if (r.ok) return ok(undefined);
  return err(`writing the status of ResourceClaim ${claim.namespace}/${claim.name}: ${r.error.status || 'no answer'} ${r.error.message}`);
}

/** The same, answering the API's failure as it came (its HTTP status decides whether to retry). */
export async function applyClaimStatus(
  api: KubeApiClient, claim: { namespace: string; name: string }, devices: readonly DeviceNetworkStatus[], now = new Date(),
): Promise<Result<void, ApiFailure>> {
  const claimPath = `/apis/resource.k8s.io/v1/namespaces/${segment(claim.namespace)}/resourceclaims/${segment(claim.name)}`;
  const path = `${claimPath}/status?fieldManager=${CLAIM_STATUS_MANAGER}&force=true`;
  const body = {
    apiVersion: 'resource.k8s.io/v1', kind: 'ResourceClaim', metadata: { name: claim.name, namespace: claim.namespace },
    status: { devices: devices.map((d) => deviceStatusEntry(d, now)) },
  };
  const r = await api.request('PATCH', path, 'resourceclaims/status', { body, contentType: 'application/apply-patch+yaml' });
  return r.ok ? ok(undefined) : r;
}
