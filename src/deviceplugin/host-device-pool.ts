/** A resource of host devices (interface names or PCI addresses, SR-IOV VFs among them) offered to the kubelet. */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { HEALTHY, UNHEALTHY, type ContainerAllocateResponse, type Device } from './api';
import { AllocationBook } from './allocations';
import { PCI_ADDRESS } from '../common/pci-address';
import type { HostDeviceResource } from './config';
import { writeDeviceInfo } from './device-info';
import { type DeviceResource, envSuffix, heldByClaim, heldOf, type ResourceEnv, unknownDevices } from './resources';
import { errorMessage } from '../common/error-message';

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
        new CniError(CniCode.IoFailure, `${this.name}: allocating ${deviceIDs.join(', ')}: ${errorMessage(e)}`),
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
