/**
 * A claim's status.devices[] (KEP-4817): for each plexus.io device, the network interface it became in the pod
 * (networkData: interface name, addresses, MAC) and a Ready condition, or Ready=False with the attach error. Written by
 * server-side apply on the status subresource under plexusd's own field manager, so entries of other drivers are left
 * alone and a device left out of the next apply loses its entry. Written by ClaimStatusSink (claim-status-sink.ts)
 * once the pod's interfaces exist; nothing in DRA's Prepare path needs it.
 */
import { segment, type ApiFailure } from '../common/api-object';
import { type KubeApiClient } from '../k8s/api-client';
import { err, ok, type Result } from '../common/result';
import { DRIVER_NAME } from './api';
import { definedFields } from '../common/defined-fields';

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
    type: 'Ready',
    status: ready ? 'True' : 'False',
    lastTransitionTime: now.toISOString().replace(/\.\d+Z$/, 'Z'),
    reason: ready ? 'NetworkReady' : 'NetworkAttachFailed',
    message: ready ? `interface ${d.network?.interfaceName ?? ''} is in the pod` : (d.error ?? '').slice(0, 32768),
  };
  return {
    driver: DRIVER_NAME,
    pool: d.pool,
    device: d.device,
    conditions: [condition],
    ...(ready && d.network ? { networkData: networkData(d.network) } : {}),
  };
}

function networkData(n: NonNullable<DeviceNetworkStatus['network']>): Record<string, unknown> {
  return { interfaceName: n.interfaceName, ips: [...n.ips], ...definedFields({ hardwareAddress: n.mac || undefined }) };
}

/** Applies the entries of these devices to the claim's status (an empty list removes plexusd's entries). */
export async function applyClaimDeviceStatus(
  api: KubeApiClient,
  claim: { namespace: string; name: string },
  devices: readonly DeviceNetworkStatus[],
  now = new Date(),
): Promise<Result<void, string>> {
  const r = await applyClaimStatus(api, claim, devices, now);
  if (r.ok) return ok(undefined);
  return err(
    `writing the status of ResourceClaim ${claim.namespace}/${claim.name}: ${r.error.status || 'no answer'} ${r.error.message}`,
  );
}

/**
 * The same, answering the API's failure as it came (its HTTP status decides whether to retry). The API refuses the
 * apply as a change of the immutable status.allocation when the claim's opaque parameters are stored in another form
 * than the apply's round trip makes of them (keys not in sorted order, as a client other than kubectl may send them):
 * then the claim is read and its status written whole (PUT, with its resourceVersion), the other drivers' entries kept.
 */
export async function applyClaimStatus(
  api: KubeApiClient,
  claim: { namespace: string; name: string },
  devices: readonly DeviceNetworkStatus[],
  now = new Date(),
): Promise<Result<void, ApiFailure>> {
  const claimPath = `/apis/resource.k8s.io/v1/namespaces/${segment(claim.namespace)}/resourceclaims/${segment(claim.name)}`;
  const path = `${claimPath}/status?fieldManager=${CLAIM_STATUS_MANAGER}&force=true`;
  const entries = devices.map((d) => deviceStatusEntry(d, now));
  const body = {
    apiVersion: 'resource.k8s.io/v1',
    kind: 'ResourceClaim',
    metadata: { name: claim.name, namespace: claim.namespace },
    status: { devices: entries },
  };
  const r = await api.request('PATCH', path, 'resourceclaims/status', {
    body,
    contentType: 'application/apply-patch+yaml',
  });
  if (r.ok) return ok(undefined);
  if (r.error.status !== 422 || !r.error.message.includes('status.allocation')) return r;
  return replaceClaimStatus(api, claimPath, entries);
}

/** Reads the claim and writes its status.devices[] with plexusd's entries replaced (a 409 is retried by the caller). */
async function replaceClaimStatus(
  api: KubeApiClient,
  claimPath: string,
  entries: readonly Record<string, unknown>[],
): Promise<Result<void, ApiFailure>> {
  const got = await api.request('GET', claimPath, 'resourceclaims');
  if (!got.ok) return got;
  const live = got.value as { status?: { devices?: { driver?: string }[] } };
  const others = (live.status?.devices ?? []).filter((d) => d.driver !== DRIVER_NAME);
  const updated = { ...live, status: { ...live.status, devices: [...others, ...entries] } };
  const put = await api.request(
    'PUT',
    `${claimPath}/status?fieldManager=${CLAIM_STATUS_MANAGER}`,
    'resourceclaims/status',
    { body: updated },
  );
  return put.ok ? ok(undefined) : put;
}
