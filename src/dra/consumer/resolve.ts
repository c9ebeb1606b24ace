/**
 * Device IDs from other DRA drivers' claims, as Multus does it (its draclient, after v4.3.0): for each claim a pod
 * holds, each allocated device (results[]: driver, pool, device) is looked up in that driver's ResourceSlices; a device
 * with the attributes k8s.cni.cncf.io/resourceName and k8s.cni.cncf.io/deviceID gives that deviceID to that resource
 * name, which a NAD names in k8s.v1.cni.cncf.io/resourceName. Devices without them (a GPU in the same claim) are
 * skipped, not errors. Pure: the objects come from reader.ts.
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { ATTRIBUTES } from '../devices';
import type { AllocatedClaim, ClaimingPod, PublishedSlice } from './shapes';
import { definedFields } from '../../common/defined-fields';

/** Device IDs per resource name (k8s.cni.cncf.io/resourceName), in natural order of the IDs. */
export type ClaimDeviceIDs = ReadonlyMap<string, readonly string[]>;

export interface Resolution {
  readonly devices: ClaimDeviceIDs;
  /** Allocated devices that gave no device ID, each with why (for the log). */
  readonly skipped: readonly string[];
}

const claimErrors = {
  notMadeYet: (pod: string, ref: string) =>
    new CniError(
      CniCode.TryAgainLater,
      `pod ${pod}: the ResourceClaim of its claim ${ref} (from a template) is not in the pod's status yet`,
      'the resource claim controller (kube-controller-manager) makes it; the runtime retries the ADD',
    ),
  notAllocated: (claim: string) =>
    new CniError(
      CniCode.TryAgainLater,
      `ResourceClaim ${claim} has no device allocation`,
      'the scheduler allocates a claim before the pod is bound to a node; is kube-scheduler running?',
    ),
  notReserved: (claim: string, pod: string) =>
    new CniError(
      CniCode.InvalidEnvironment,
      `ResourceClaim ${claim} is not reserved for pod ${pod} (status.reservedFor): its devices are not the pod's`,
      'a claim is reserved for the pods the scheduler placed with it; was the claim deleted and made again?',
    ),
};

/**
 * The names of the ResourceClaims a pod holds: spec.resourceClaims[].resourceClaimName as it is, a template's claim
 * from status.resourceClaimStatuses (absent there: not made yet; present without a name: none was needed).
 */
export function claimNamesOf(pod: ClaimingPod): Result<string[]> {
  const made = new Map((pod.status?.resourceClaimStatuses ?? []).map((s) => [s.name, s.resourceClaimName]));
  const names: string[] = [];
  for (const ref of pod.spec?.resourceClaims ?? []) {
    if (ref.resourceClaimName) {
      names.push(ref.resourceClaimName);
      continue;
    }
    if (!ref.resourceClaimTemplateName) continue;
    if (!made.has(ref.name)) return err(claimErrors.notMadeYet(podKey(pod), ref.name));
    const name = made.get(ref.name);
    if (name) names.push(name);
  }
  return ok([...new Set(names)]);
}

const podKey = (pod: ClaimingPod): string => `${pod.metadata.namespace ?? ''}/${pod.metadata.name}`;
const claimKey = (c: AllocatedClaim): string => `${c.metadata.namespace ?? ''}/${c.metadata.name}`;

/** The drivers whose devices a claim was allocated, other than those in `skipDrivers`, in first-seen order. */
export function driversOf(claims: readonly AllocatedClaim[], skipDrivers: ReadonlySet<string>): string[] {
  const results = claims.flatMap((c) => c.status?.allocation?.devices?.results ?? []);
  return [...new Set(results.map((r) => r.driver).filter((d) => !skipDrivers.has(d)))];
}

interface DeviceFacts {
  readonly deviceID?: string;
  readonly resourceName?: string;
}

/** Devices by driver, pool and name; of several slices of one pool, only those of its newest generation count. */
export class SliceIndex {
  private readonly devices = new Map<string, DeviceFacts>();

  constructor(slices: readonly PublishedSlice[]) {
    const newest = new Map<string, number>();
    for (const s of slices) {
      const pool = poolKey(s.spec.driver, s.spec.pool.name);
      newest.set(pool, Math.max(newest.get(pool) ?? -Infinity, s.spec.pool.generation));
    }
    for (const s of slices) {
      const pool = poolKey(s.spec.driver, s.spec.pool.name);
      if (s.spec.pool.generation !== newest.get(pool)) continue;
      for (const d of s.spec.devices ?? []) {
        const attrs = d.attributes ?? {};
        const deviceID = attrs[ATTRIBUTES.deviceID]?.string;
        const resourceName = attrs[ATTRIBUTES.resourceName]?.string;
        const facts = definedFields({ deviceID: deviceID || undefined, resourceName: resourceName || undefined });
        this.devices.set(`${pool}\u0000${d.name}`, facts);
      }
    }
  }

  find(driver: string, pool: string, device: string): DeviceFacts | undefined {
    return this.devices.get(`${poolKey(driver, pool)}\u0000${device}`);
  }
}

const poolKey = (driver: string, pool: string): string => `${driver}\u0000${pool}`;
const naturalOrder = (a: string, b: string): number => a.localeCompare(b, 'en', { numeric: true });

/**
 * The device IDs a pod's claims give, per resource name. A claim not allocated, or not reserved for the pod (by
 * `podUid`, when given), is an error; devices of `skipDrivers` (plexusd's own, which the engine reads from its
 * prepared claims) and devices without both attributes are skipped.
 */
export function resolveClaimDevices(
  pod: { readonly key: string; readonly uid?: string },
  claims: readonly AllocatedClaim[],
  slices: SliceIndex,
  skipDrivers: ReadonlySet<string>,
): Result<Resolution> {
  const devices = new Map<string, string[]>();
  const skipped: string[] = [];
  for (const claim of claims) {
    const results = claim.status?.allocation?.devices?.results;
    if (!results) return err(claimErrors.notAllocated(claimKey(claim)));
    const reserved = claim.status?.reservedFor ?? [];
    if (pod.uid && !reserved.some((r) => (r.resource ?? 'pods') === 'pods' && r.uid === pod.uid)) {
      return err(claimErrors.notReserved(claimKey(claim), pod.key));
    }
    for (const r of results) {
      if (skipDrivers.has(r.driver)) continue;
      const where = `${claimKey(claim)}: device ${r.device} of pool ${r.pool} (driver ${r.driver})`;
      const facts = slices.find(r.driver, r.pool, r.device);
      if (!facts) skipped.push(`${where} is in none of the driver's ResourceSlices of this node`);
      else if (!facts.deviceID) skipped.push(`${where} has no ${ATTRIBUTES.deviceID} attribute`);
      else if (!facts.resourceName) skipped.push(`${where} has no ${ATTRIBUTES.resourceName} attribute`);
      else devices.set(facts.resourceName, [...(devices.get(facts.resourceName) ?? []), facts.deviceID]);
    }
  }
  for (const ids of devices.values()) ids.sort(naturalOrder);
  return ok({ devices, skipped });
}
