/**
 * Which devices other DRA drivers' claims give a pod, per k8s.cni.cncf.io/resourceName: the same shape as the
 * kubelet's pod-resources answer (src/deviceplugin/pod-resources.ts), so the engine hands them out to the networks
 * naming that resource as it hands out device-plugin devices. One read of the pod; then, only if it holds claims,
 * each claim and each driver's ResourceSlices of the pod's node.
 */
import type { Logger } from 'pino';
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { DRIVER_NAME } from '../api';
import type { ClaimsPort } from './claims-port';
import { claimNamesOf, driversOf, resolveClaimDevices, SliceIndex, type ClaimDeviceIDs } from './resolve';
import type { AllocatedClaim, PublishedSlice } from './shapes';
import { definedFields } from '../../common/defined-fields';

/** Device IDs per resource name, as the engine asks for them (plan.ts's DeviceSource). */
export interface PodDeviceSource {
  devicesOf(namespace: string, name: string): Promise<Result<ReadonlyMap<string, readonly string[]>>>;
}

export interface ClaimDeviceOptions {
  /** Drivers whose claims are not read here: by default plexus.io, whose devices the engine has from Prepare. */
  readonly skipDrivers?: readonly string[];
  readonly log?: Logger;
}

const apiFailure = (message: string): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    message,
    "plexusd reads the pod, its ResourceClaims and their drivers' ResourceSlices (RBAC: deploy/10-rbac.yaml)",
  );
const podMissing = (namespace: string, name: string): CniError =>
  new CniError(CniCode.TryAgainLater, `pod ${namespace}/${name} is not in the API: its DRA claims cannot be read`);
const claimMissing = (namespace: string, name: string): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `ResourceClaim ${namespace}/${name} of the pod does not exist (deleted while the pod starts?)`,
  );

export class ClaimDeviceReader implements PodDeviceSource {
  private readonly skipDrivers: ReadonlySet<string>;

  constructor(
    private readonly port: ClaimsPort,
    private readonly options: ClaimDeviceOptions = {},
  ) {
    this.skipDrivers = new Set(options.skipDrivers ?? [DRIVER_NAME]);
  }

  async devicesOf(namespace: string, name: string): Promise<Result<ClaimDeviceIDs>> {
    const read = await this.port.pod(namespace, name);
    if (!read.ok) return err(apiFailure(read.error));
    if (!read.value) return err(podMissing(namespace, name));
    const pod = read.value;
    const names = claimNamesOf(pod);
    if (!names.ok) return names;
    if (names.value.length === 0) return ok(new Map());
    const claims = await this.claims(namespace, names.value);
    if (!claims.ok) return claims;
    const slices = await this.slices(driversOf(claims.value, this.skipDrivers), pod.spec?.nodeName);
    if (!slices.ok) return slices;
    const podRef = { key: `${namespace}/${name}`, ...definedFields({ uid: pod.metadata.uid || undefined }) };
    const resolved = resolveClaimDevices(podRef, claims.value, new SliceIndex(slices.value), this.skipDrivers);
    if (!resolved.ok) return resolved;
    const skipped = resolved.value.skipped;
    if (skipped.length) this.options.log?.info({ pod: podRef.key, skipped }, 'claimed devices without a CNI device ID');
    return ok(resolved.value.devices);
  }

  private async claims(namespace: string, names: readonly string[]): Promise<Result<AllocatedClaim[]>> {
    const out: AllocatedClaim[] = [];
    for (const name of names) {
      const got = await this.port.claim(namespace, name);
      if (!got.ok) return err(apiFailure(got.error));
      if (!got.value) return err(claimMissing(namespace, name));
      out.push(got.value);
    }
    return ok(out);
  }

  private async slices(drivers: readonly string[], nodeName: string | undefined): Promise<Result<PublishedSlice[]>> {
    const lists = await Promise.all(drivers.map((d) => this.port.slices(d, nodeName)));
    const failed = lists.find((l) => !l.ok);
    if (failed && !failed.ok) return err(apiFailure(failed.error));
    return ok(lists.flatMap((l) => (l.ok ? l.value : [])));
  }
}

/**
 * The kubelet's device-plugin devices and the claims' devices of a pod as one answer: per resource name, the
 * kubelet's first. Both are asked at once; either failing fails the call (a device left out would go to the wrong
 * network).
 */
export function withClaimedDevices(kubelet: PodDeviceSource, claims: PodDeviceSource): PodDeviceSource {
  return {
    async devicesOf(namespace, name) {
      const [fromKubelet, fromClaims] = await Promise.all([
        kubelet.devicesOf(namespace, name),
        claims.devicesOf(namespace, name),
      ]);
      if (!fromKubelet.ok) return fromKubelet;
      if (!fromClaims.ok) return fromClaims;
      if (fromClaims.value.size === 0) return fromKubelet;
      const merged = new Map<string, readonly string[]>(fromKubelet.value);
      for (const [resource, ids] of fromClaims.value) merged.set(resource, [...(merged.get(resource) ?? []), ...ids]);
      return ok(merged);
    },
  };
}
