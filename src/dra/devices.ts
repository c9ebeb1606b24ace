/**
 * The devices plexusd offers as DRA devices: every resource of the resources file that offers `dra`, one pool per
 * resource on this node, each device with the attributes a DeviceClass or a claim can select on (docs/dra.md).
 */
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { PCI_ADDRESS } from '../common/pci-address';
import { offers, type MemifResource, type ResourceConfig } from '../deviceplugin/config';
import { DRIVER_NAME } from './api';
import { hostDeviceFacts, type HostDeviceFacts } from './sysfs';

/** A ResourceSlice attribute value (resource.k8s.io/v1 DeviceAttribute: exactly one field set). */
export type AttributeValue = { string: string } | { int: number } | { bool: boolean } | { version: string };

export const ATTRIBUTES = {
  kind: `${DRIVER_NAME}/kind`,
  interfaceName: `${DRIVER_NAME}/interfaceName`,
  pciAddress: `${DRIVER_NAME}/pciAddress`,
  numaNode: `${DRIVER_NAME}/numaNode`,
  pcieRoot: 'resource.kubernetes.io/pcieRoot',
  /** Multus 4.3 reads these two from a claim's allocated device (matched to a NAD's resourceName annotation). */
  deviceID: 'k8s.cni.cncf.io/deviceID',
  resourceName: 'k8s.cni.cncf.io/resourceName',
} as const;

export interface DraDevice {
  /** The device's name in its slice (a DNS label). */
  readonly name: string;
  readonly pool: string;
  readonly resourceName: string;
  readonly kind: 'host-device' | 'memif';
  /** What a CNI plugin gets as deviceID: the PCI address, the interface name, or the memif device (memif0...). */
  readonly deviceID: string;
  readonly attributes: Readonly<Record<string, AttributeValue>>;
}

export interface DraPool {
  readonly name: string;
  readonly resourceName: string;
  /** Devices to publish now, in the order of the resources file. */
  readonly devices: readonly DraDevice[];
}

/** A device name (DNS label, 63 at most) for a pool entry: eth3 stays, 0000:03:00.1 becomes pci-0000-03-00-1. */
export function deviceName(entry: string): string {
  const base = PCI_ADDRESS.test(entry) ? `pci-${entry.toLowerCase()}` : entry.toLowerCase();
  const label = base.replace(/[^a-z0-9-]/g, '-').replace(/^-+|-+$/g, '');
  if (label === entry && label.length <= 63) return label;
  // Anything renamed gets a short hash of the original, so two entries never meet on one name (eth.1 and eth_1).
  const hash = createHash('sha256').update(entry).digest('hex').slice(0, 6);
  return `${label.slice(0, 56) || 'dev'}-${hash}`.replace(/^-+/, '');
}

/** A pool's name: this node's, then the resource's (pools are per driver cluster-wide, so the node is in it). */
export const poolName = (nodeName: string, resourceName: string): string => `${nodeName}/${resourceName}`;

const str = (s: string): AttributeValue => ({ string: s });

function hostDeviceAttributes(
  resourceName: string,
  entry: string,
  facts: HostDeviceFacts,
): Record<string, AttributeValue> {
  return {
    [ATTRIBUTES.kind]: str('host-device'),
    [ATTRIBUTES.resourceName]: str(resourceName),
    [ATTRIBUTES.deviceID]: str(PCI_ADDRESS.test(entry) ? entry.toLowerCase() : entry),
    ...(facts.interfaceName ? { [ATTRIBUTES.interfaceName]: str(facts.interfaceName) } : {}),
    ...(facts.pciAddress ? { [ATTRIBUTES.pciAddress]: str(facts.pciAddress) } : {}),
    ...(facts.pcieRoot ? { [ATTRIBUTES.pcieRoot]: str(facts.pcieRoot) } : {}),
    ...(facts.numaNode !== undefined ? { [ATTRIBUTES.numaNode]: { int: facts.numaNode } } : {}),
  };
}

export interface InventoryOptions {
  readonly nodeName: string;
  /** sysfs (tests give a tree of their own). */
  readonly sysfsRoot?: string;
}

/**
 * The node's DRA devices, read again on each call. A host device is published while it is on the host or while a
 * prepared claim holds it (it is in a pod's network namespace then, where sysfs here cannot see it; its attributes
 * are those last seen on the host). memif devices are sockets: always there.
 */
export class DraInventory {
  private readonly lastSeen = new Map<string, HostDeviceFacts>();

  constructor(
    private readonly resources: readonly ResourceConfig[],
    private readonly options: InventoryOptions,
  ) {}

  get nodeName(): string {
    return this.options.nodeName;
  }

  /** Resources offered as DRA devices. */
  get offered(): ResourceConfig[] {
    return this.resources.filter((r) => offers(r, 'dra'));
  }

  /** The pools now; `held(pool, device)` says whether a prepared claim holds a device. */
  pools(held: (pool: string, device: string) => boolean = () => false): DraPool[] {
    return this.offered.map((r) => {
      const pool = poolName(this.options.nodeName, r.name);
      if (r.kind === 'memif') {
        const devices = Array.from({ length: r.count }, (_, i): DraDevice => {
          const id = `memif${i}`;
          return {
            name: id,
            pool,
            resourceName: r.name,
            kind: 'memif',
            deviceID: id,
            attributes: {
              [ATTRIBUTES.kind]: str('memif'),
              [ATTRIBUTES.resourceName]: str(r.name),
              [ATTRIBUTES.deviceID]: str(id),
            },
          };
        });
        return { name: pool, resourceName: r.name, devices };
      }
      const devices = r.devices.flatMap((entry): DraDevice[] => {
        const name = deviceName(entry);
        const facts = this.facts(r.name, entry);
        if (!facts.present && !held(pool, name)) return [];
        const seen = facts.present ? facts : (this.lastSeen.get(`${r.name}/${entry}`) ?? facts);
        const deviceID = PCI_ADDRESS.test(entry) ? entry.toLowerCase() : entry;
        return [
          {
            name,
            pool,
            resourceName: r.name,
            kind: 'host-device',
            deviceID,
            attributes: hostDeviceAttributes(r.name, entry, seen),
          },
        ];
      });
      return { name: pool, resourceName: r.name, devices };
    });
  }

  /** Where a memif device's socket directory goes (the resource's socketDir); undefined for other devices. */
  memifDir(resourceName: string, deviceID: string): string | undefined {
    const r = this.resources.find((c) => c.name === resourceName);
    return r?.kind === 'memif' ? join(r.socketDir, deviceID) : undefined;
  }

  /** The memif resource of that name; undefined for other resources. */
  memifResource(resourceName: string): MemifResource | undefined {
    const r = this.resources.find((c) => c.name === resourceName);
    return r?.kind === 'memif' ? r : undefined;
  }

  /** One device of a pool, whether or not it is published now (Prepare looks devices up by name). */
  find(pool: string, device: string): DraDevice | undefined {
    for (const p of this.pools(() => true)) {
      if (p.name !== pool) continue;
      return p.devices.find((d) => d.name === device);
    }
    return undefined;
  }

  private facts(resourceName: string, entry: string): HostDeviceFacts {
    const facts = hostDeviceFacts(entry, this.options.sysfsRoot);
    if (facts.present) this.lastSeen.set(`${resourceName}/${entry}`, facts);
    return facts;
  }
}
