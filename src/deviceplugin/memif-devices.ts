/** A resource of memif sockets on the node's userspace switch, offered to the kubelet as devices. */
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { memifSecret, MEMIF_SOCKET_FILE } from '../common/memif';
import { HEALTHY, UNHEALTHY, type ContainerAllocateResponse, type Device } from './api';
import { AllocationBook } from './allocations';
import type { MemifResource } from './config';
import { DEVICE_INFO_VERSION, type DeviceInfo, removeDeviceInfo, writeDeviceInfo } from './device-info';
import {
  type DeviceResource,
  envSuffix,
  heldByClaim,
  heldOf,
  type ResourceEnv,
  unknownDevices,
  watchHeld,
} from './resources';
import { errorMessage } from '../common/error-message';

/** Where a container sees a memif device's socket: `<containerPath>/<device>/memif.sock`. */
export const memifContainerSocket = (config: MemifResource, deviceID: string): string =>
  join(config.containerPath, deviceID, MEMIF_SOCKET_FILE);

/** The device-info file of a memif device handed to a pod (the pod's end is the client). */
export const memifDeviceInfo = (config: MemifResource, deviceID: string): DeviceInfo => ({
  type: 'memif',
  version: DEVICE_INFO_VERSION,
  memif: { role: 'slave', path: memifContainerSocket(config, deviceID), mode: config.mode },
});

/**
 * What a container is given for memif devices of one resource, each with its secret: every device's host directory
 * mounted at `<containerPath>/<device>`, MEMIF_SOCKET and MEMIF_SECRET (comma-separated, in the devices' order), and
 * PLEXUS_DEVICES_<resource> naming the devices. The device plugin's Allocate answers it; a DRA claim's CDI spec
 * carries the same (src/dra/cdi-specs.ts).
 */
export function memifContainerEdits(
  config: MemifResource,
  devices: readonly { readonly deviceID: string; readonly secret: string }[],
): Pick<ContainerAllocateResponse, 'envs' | 'mounts'> {
  const ids = devices.map((d) => d.deviceID);
  return {
    envs: {
      MEMIF_SOCKET: ids.map((id) => memifContainerSocket(config, id)).join(','),
      MEMIF_SECRET: devices.map((d) => d.secret).join(','),
      [`PLEXUS_DEVICES_${envSuffix(config.name)}`]: ids.join(','),
    },
    mounts: ids.map((id) => ({
      container_path: join(config.containerPath, id),
      host_path: join(config.socketDir, id),
      read_only: false,
    })),
  };
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
    return memifContainerSocket(this.config, deviceID);
  }

  allocate(deviceIDs: readonly string[]): Result<ContainerAllocateResponse> {
    const unknown = deviceIDs.filter((id) => !this.ids.includes(id));
    if (unknown.length) return err(unknownDevices(this.name, unknown));
    const held = heldOf(this.env, this.name, deviceIDs);
    if (held.length) return err(heldByClaim(this.name, held));
    const made = new Map<string, { secret: string; socket: string }>();
    try {
      for (const id of deviceIDs) {
        const dir = this.hostDir(id);
        rmSync(dir, { recursive: true, force: true });
        mkdirSync(dir, { recursive: true, mode: 0o755 });
        made.set(id, { secret: memifSecret(), socket: join(dir, MEMIF_SOCKET_FILE) });
        writeDeviceInfo(this.env.deviceInfoDir, this.name, id, memifDeviceInfo(this.config, id));
      }
      this.book.record(made);
    } catch (e) {
      return err(
        new CniError(CniCode.IoFailure, `${this.name}: allocating ${deviceIDs.join(', ')}: ${errorMessage(e)}`),
      );
    }
    const edits = memifContainerEdits(
      this.config,
      deviceIDs.map((id) => ({ deviceID: id, secret: made.get(id)!.secret })),
    );
    return ok({ ...edits, devices: [], annotations: {} });
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
