/** A resource of memif sockets on the node's userspace switch, offered to the kubelet as devices. */
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { memifSecret, MEMIF_SOCKET_FILE } from '../common/memif';
import { HEALTHY, UNHEALTHY, type ContainerAllocateResponse, type Device } from './api';
import { AllocationBook } from './allocations';
import type { MemifResource } from './config';
import { removeDeviceInfo, writeDeviceInfo } from './device-info';
import {
  type DeviceResource,
  envSuffix,
  heldByClaim,
  heldOf,
  type ResourceEnv,
  unknownDevices,
  watchHeld,
} from './resources';

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
