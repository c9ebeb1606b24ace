/**
 * The resources plexusd offers: what devices each has, their health, and what Allocate does for them. The gRPC
 * side (plugin-server.ts) knows them only through DeviceResource; its two kinds are MemifDevices (memif-devices.ts)
 * and HostDevicePool (host-device-pool.ts), which share the DRA hand-off below.
 */
import { CniCode, CniError, type Result } from '../cni/errors';
import type { ContainerAllocateResponse, Device } from './api';

export interface DeviceResource {
  readonly name: string;
  /** Every device with its health now. */
  devices(): Device[];
  /** Calls back when health may have changed; answers how to stop. */
  watch(onChange: () => void): () => void;
  preferred(available: readonly string[], mustInclude: readonly string[], size: number): string[];
  /** One container's devices: what the kubelet hands the container. */
  allocate(deviceIDs: readonly string[]): Result<ContainerAllocateResponse>;
}

export interface ResourceEnv {
  /** Where NPWG device-info files go (their dp/ subdirectory). */
  readonly deviceInfoDir: string;
  /** plexusd's state dir (allocation books); undefined keeps them in memory. */
  readonly stateDir?: string;
  /** Whether a device is assigned to a pod now (the kubelet's pod-resources); a host device in a pod is not on the host. */
  readonly inUse?: (resourceName: string, deviceID: string) => Promise<boolean>;
  readonly healthIntervalMs?: number;
  /** Whether the node's userspace switch can serve memif ports now (for memif resources with healthFromSwitch). */
  readonly switchReady?: () => Promise<boolean>;
  /**
   * Whether a prepared DRA claim holds a device now (a resource offered both ways): such a device is not offered to
   * the kubelet's device manager (Unhealthy, refused by Allocate) until the claim is unprepared.
   */
  readonly heldByDra?: (resourceName: string, deviceID: string) => boolean;
}

/** Environment variable names from a resource name, as the SR-IOV device plugin makes them (plexus.io/fast-nic: PLEXUS_IO_FAST_NIC). */
export const envSuffix = (resourceName: string): string => resourceName.toUpperCase().replace(/[^A-Z0-9]/g, '_');

export const unknownDevices = (resource: string, ids: readonly string[]): CniError =>
  new CniError(CniCode.InvalidNetworkConfig, `${resource} has no device ${ids.join(', ')}`);
export const heldByClaim = (resource: string, ids: readonly string[]): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `${resource} device ${ids.join(', ')} is prepared for a DRA claim: not the device plugin's until the claim is unprepared`,
    'a resource offered both as a device plugin and as DRA devices gives each device one way at a time',
  );

/** The devices of `ids` a DRA claim holds now. */
export const heldOf = (env: ResourceEnv, resource: string, ids: readonly string[]): string[] =>
  env.heldByDra ? ids.filter((id) => env.heldByDra!(resource, id)) : [];

/**
 * Calls `onChange` when the set of devices DRA holds changes (polled: prepared claims change in another part of
 * plexusd); answers how to stop. Without heldByDra there is nothing to follow.
 */
export function watchHeld(
  env: ResourceEnv,
  resource: string,
  ids: readonly string[],
  onChange: () => void,
): () => void {
  if (!env.heldByDra) return () => undefined;
  let last = heldOf(env, resource, ids).join(',');
  const timer = setInterval(() => {
    const now = heldOf(env, resource, ids).join(',');
    if (now === last) return;
    last = now;
    onChange();
  }, env.healthIntervalMs ?? 2000);
  timer.unref();
  return () => clearInterval(timer);
}
