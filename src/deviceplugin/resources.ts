/**
 * The resources plexusd offers: what devices each has, their health, and what Allocate does for them. The gRPC
 * side (plugin-server.ts) knows them only through DeviceResource.
 */
import { mkdirSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { HEALTHY, UNHEALTHY, type ContainerAllocateResponse, type Device } from './api';
import { AllocationBook } from './allocations';
import type { HostDeviceResource, MemifResource } from './config';
import { PCI_ADDRESS } from './config';
import { removeDeviceInfo, writeDeviceInfo } from './device-info';

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

import { memifSecret, MEMIF_SOCKET_FILE } from '../common/memif';

export { MEMIF_SECRET_LENGTH, memifSecret, MEMIF_SOCKET_FILE } from '../common/memif';

const unknownDevices = (resource: string, ids: readonly string[]): CniError =>
  new CniError(CniCode.InvalidNetworkConfig, `${resource} has no device ${ids.join(', ')}`);
const heldByClaim = (resource: string, ids: readonly string[]): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `${resource} device ${ids.join(', ')} is prepared for a DRA claim: not the device plugin's until the claim is unprepared`,
    'a resource offered both as a device plugin and as DRA devices gives each device one way at a time',
  );

/** The devices of `ids` a DRA claim holds now. */
const heldOf = (env: ResourceEnv, resource: string, ids: readonly string[]): string[] =>
  env.heldByDra ? ids.filter((id) => env.heldByDra!(resource, id)) : [];

/**
 * Calls `onChange` when the set of devices DRA holds changes (polled: prepared claims change in another part of
 * plexusd); answers how to stop. Without heldByDra there is nothing to follow.
 */
function watchHeld(env: ResourceEnv, resource: string, ids: readonly string[], onChange: () => void): () => void {
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

/**
 * plexus.io/memif-style resources: `count` sockets. Allocate makes the device's directory anew on the host (an old
 * pod's socket is removed), draws a new secret, writes the device-info file, and hands the container the directory
 * as a mount with MEMIF_SOCKET and MEMIF_SECRET.
 */
export class MemifDevices implements DeviceResource {
  readonly name: string;
  private readonly ids: readonly string[];
  private readonly book: AllocationBook;

  constructor(
    private readonly config: MemifResource,
    private readonly env: ResourceEnv,
  ) {
    this.name = config.name;
    this.ids = Array.from({ length: config.count }, (_, i) => `memif${i}`);
    this.book = AllocationBook.forResource(env.stateDir, config.name);
    this.book.retainOnly(new Set(this.ids));
  }

  /** With healthFromSwitch: the switch's state at the last check (unknown until the first: healthy). */
  private switchHealth = HEALTHY;

  devices(): Device[] {
    const held = heldOf(this.env, this.name, this.ids);
    return this.ids.map((ID) => ({ ID, health: held.includes(ID) ? UNHEALTHY : this.switchHealth }));
  }

  /**
   * With healthFromSwitch, every device follows the switch; otherwise a socket's directory has no health to follow.
   * A device DRA holds is Unhealthy either way.
   */
  watch(onChange: () => void): () => void {
    const stopHeld = watchHeld(this.env, this.name, this.ids, onChange);
    const stopSwitch = this.watchSwitch(onChange);
    return () => {
      stopHeld();
      stopSwitch();
    };
  }

  private watchSwitch(onChange: () => void): () => void {
    const ready = this.env.switchReady;
    if (!this.config.healthFromSwitch || !ready) return () => undefined;
    let running = false;
    const check = (): void => {
      if (running) return;
      running = true;
      void ready()
        .catch(() => false)
        .then((up) => {
          const health = up ? HEALTHY : UNHEALTHY;
          if (health === this.switchHealth) return;
          this.switchHealth = health;
          onChange();
        })
        .finally(() => {
          running = false;
        });
    };
    const timer = setInterval(check, this.env.healthIntervalMs ?? 2000);
    timer.unref();
    check();
    return () => clearInterval(timer);
  }

  preferred(available: readonly string[], mustInclude: readonly string[], size: number): string[] {
    return this.book.preferred(available, mustInclude, size);
  }

  /** The host socket and secret of a device's current allocation (what the switch's port is made with). */
  allocation(deviceID: string): { socket: string; secret: string } | undefined {
    const e = this.book.get(deviceID);
    return e?.socket && e.secret ? { socket: e.socket, secret: e.secret } : undefined;
  }

  hostDir(deviceID: string): string {
    return join(this.config.socketDir, deviceID);
  }

  containerSocket(deviceID: string): string {
    return join(this.config.containerPath, deviceID, MEMIF_SOCKET_FILE);
  }

  allocate(deviceIDs: readonly string[]): Result<ContainerAllocateResponse> {
    const unknown = deviceIDs.filter((id) => !this.ids.includes(id));
    if (unknown.length) return err(unknownDevices(this.name, unknown));
    const held = heldOf(this.env, this.name, deviceIDs);
    if (held.length) return err(heldByClaim(this.name, held));
    const made = new Map<string, { secret: string; socket: string }>();
    const mounts: ContainerAllocateResponse['mounts'] = [];
    try {
      for (const id of deviceIDs) {
        const dir = this.hostDir(id);
        rmSync(dir, { recursive: true, force: true });
        mkdirSync(dir, { recursive: true, mode: 0o755 });
        const secret = memifSecret();
        made.set(id, { secret, socket: join(dir, MEMIF_SOCKET_FILE) });
        writeDeviceInfo(this.env.deviceInfoDir, this.name, id, {
          type: 'memif',
          version: '1.1.0',
          memif: { role: 'slave', path: this.containerSocket(id), mode: this.config.mode },
        });
        mounts.push({ container_path: join(this.config.containerPath, id), host_path: dir, read_only: false });
      }
      this.book.record(made);
    } catch (e) {
      return err(
        new CniError(CniCode.IoFailure, `${this.name}: allocating ${deviceIDs.join(', ')}: ${(e as Error).message}`),
      );
    }
    const sockets = deviceIDs.map((id) => this.containerSocket(id));
    const secrets = deviceIDs.map((id) => made.get(id)!.secret);
    return ok({
      envs: {
        MEMIF_SOCKET: sockets.join(','),
        MEMIF_SECRET: secrets.join(','),
        [`PLEXUS_DEVICES_${envSuffix(this.name)}`]: deviceIDs.join(','),
      },
      mounts,
      devices: [],
      annotations: {},
    });
  }

  /** Device-info files and socket directories of devices no longer offered (a smaller count) are removed at start. */
  removeStale(): void {
    let entries: string[];
    try {
      entries = readdirSync(this.config.socketDir);
    } catch {
      return;
    }
    for (const id of entries) {
      if (/^memif\d+$/.test(id) && !this.ids.includes(id)) {
        rmSync(join(this.config.socketDir, id), { recursive: true, force: true });
        removeDeviceInfo(this.env.deviceInfoDir, this.name, id);
      }
    }
  }
}

/** Whether a host interface (in plexusd's network namespace) is up with carrier; undefined when it is not there. */
export function linkUp(name: string): boolean | undefined {
  let flags: number;
  try {
    flags = Number.parseInt(readFileSync(`/sys/class/net/${name}/flags`, 'utf8').trim(), 16);
  } catch {
    return undefined;
  }
  if ((flags & 1) === 0) return false; // IFF_UP
  try {
    return readFileSync(`/sys/class/net/${name}/carrier`, 'utf8').trim() === '1';
  } catch {
    return false; // EINVAL while down
  }
}

/** A PCI function's health: present, and its netdev (when it has one in this namespace) up. Undefined when absent. */
function pciUp(address: string): boolean | undefined {
  const dir = `/sys/bus/pci/devices/${address}`;
  try {
    statSync(dir);
  } catch {
    return undefined;
  }
  let netdevs: string[];
  try {
    netdevs = readdirSync(join(dir, 'net'));
  } catch {
    return true; // bound to a userspace driver (vfio-pci): no netdev, nothing more to see
  }
  return netdevs.length === 0 ? true : netdevs.some((n) => linkUp(n) === true);
}

/**
 * A pool of host devices (interface names or PCI addresses). A device is healthy while it is up with carrier; one
 * that is missing from the host is healthy only while the kubelet has it assigned to a pod (it is in that pod's
 * network namespace then); one a DRA claim holds is unhealthy whatever the host shows. Health is polled;
 * ListAndWatch is told of changes.
 */
export class HostDevicePool implements DeviceResource {
  readonly name: string;
  private readonly ids: readonly string[];
  private readonly book: AllocationBook;
  private health = new Map<string, string>();

  constructor(
    config: HostDeviceResource,
    private readonly env: ResourceEnv,
  ) {
    this.name = config.name;
    this.ids = config.devices.map((d) => (PCI_ADDRESS.test(d) ? d.toLowerCase() : d));
    this.book = AllocationBook.forResource(env.stateDir, config.name);
    this.book.retainOnly(new Set(this.ids));
    for (const id of this.ids)
      this.health.set(id, this.heldByDra(id) ? UNHEALTHY : (this.presentHealth(id) ?? UNHEALTHY));
  }

  private heldByDra(id: string): boolean {
    return this.env.heldByDra?.(this.name, id) ?? false;
  }

  devices(): Device[] {
    return this.ids.map((ID) => ({ ID, health: this.health.get(ID) ?? UNHEALTHY }));
  }

  /** What the host shows of the device: Healthy, Unhealthy, or undefined when it is not on the host. */
  private presentHealth(id: string): string | undefined {
    const up = PCI_ADDRESS.test(id) ? pciUp(id) : linkUp(id);
    return up === undefined ? undefined : up ? HEALTHY : UNHEALTHY;
  }

  /** Reads every device's health again; answers whether any changed. */
  async refresh(): Promise<boolean> {
    let changed = false;
    for (const id of this.ids) {
      let health = this.heldByDra(id) ? UNHEALTHY : this.presentHealth(id);
      if (health === undefined)
        health = (await this.env.inUse?.(this.name, id).catch(() => false)) ? HEALTHY : UNHEALTHY;
      if (this.health.get(id) !== health) {
        this.health.set(id, health);
        changed = true;
      }
    }
    return changed;
  }

  watch(onChange: () => void): () => void {
    let running = false;
    const timer = setInterval(() => {
      if (running) return;
      running = true;
      this.refresh()
        .then((changed) => changed && onChange())
        .catch(() => undefined)
        .finally(() => {
          running = false;
        });
    }, this.env.healthIntervalMs ?? 2000);
    timer.unref();
    return () => clearInterval(timer);
  }

  preferred(available: readonly string[], mustInclude: readonly string[], size: number): string[] {
    return this.book.preferred(available, mustInclude, size);
  }

  allocate(deviceIDs: readonly string[]): Result<ContainerAllocateResponse> {
    const unknown = deviceIDs.filter((id) => !this.ids.includes(id));
    if (unknown.length) return err(unknownDevices(this.name, unknown));
    const held = heldOf(this.env, this.name, deviceIDs);
    if (held.length) return err(heldByClaim(this.name, held));
    const pci = deviceIDs.filter((id) => PCI_ADDRESS.test(id));
    try {
      for (const id of pci)
        writeDeviceInfo(this.env.deviceInfoDir, this.name, id, {
          type: 'pci',
          version: '1.1.0',
          pci: { 'pci-address': id },
        });
      this.book.record(new Map(deviceIDs.map((id) => [id, {}])));
    } catch (e) {
      return err(
        new CniError(CniCode.IoFailure, `${this.name}: allocating ${deviceIDs.join(', ')}: ${(e as Error).message}`),
      );
    }
    const suffix = envSuffix(this.name);
    return ok({
      envs: {
        [`PLEXUS_DEVICES_${suffix}`]: deviceIDs.join(','),
        ...(pci.length ? { [`PCIDEVICE_${suffix}`]: pci.join(',') } : {}),
      },
      mounts: [],
      devices: [],
      annotations: {},
    });
  }
}
