/**
 * What sysfs says about a host device: its PCI address, its PCIe root and NUMA node, and its interface name. Read
 * under a root (default /sys) so tests can give a tree of their own. Nothing here throws: what cannot be read is absent.
 */
import { readdirSync, readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { PCI_ADDRESS } from '../common/pci-address';
import { definedFields } from '../common/defined-fields';

export interface HostDeviceFacts {
  /** Whether the device is on the host now (its netdev in this namespace, or its PCI function). */
  readonly present: boolean;
  readonly interfaceName?: string;
  readonly pciAddress?: string;
  /** The PCI root complex the device hangs off, e.g. pci0000:00 (resource.kubernetes.io/pcieRoot). */
  readonly pcieRoot?: string;
  readonly numaNode?: number;
}

const readText = (path: string): string | undefined => {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return undefined;
  }
};
const realpath = (path: string): string | undefined => {
  try {
    return realpathSync(path);
  } catch {
    return undefined;
  }
};
const list = (dir: string): string[] => {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
};

/** The PCI facts of a PCI function's sysfs directory (its real path under <root>/devices). */
function pciFacts(root: string, deviceDir: string): Omit<HostDeviceFacts, 'present' | 'interfaceName'> {
  const segments = deviceDir.slice(join(root, 'devices').length + 1).split('/');
  const address = [...segments].reverse().find((s) => PCI_ADDRESS.test(s));
  const rootSegment = segments[0]?.startsWith('pci') ? segments[0] : undefined;
  const numa = Number.parseInt(readText(join(deviceDir, 'numa_node')) ?? '', 10);
  return {
    ...(address ? { pciAddress: address.toLowerCase() } : {}),
    ...definedFields({ pcieRoot: rootSegment || undefined }),
    ...(Number.isInteger(numa) && numa >= 0 ? { numaNode: numa } : {}),
  };
}

/** Facts of a host-device pool entry: an interface name or a PCI address. */
export function hostDeviceFacts(device: string, root = '/sys'): HostDeviceFacts {
  if (PCI_ADDRESS.test(device)) {
    const dir = realpath(join(root, 'bus', 'pci', 'devices', device.toLowerCase()));
    if (!dir) return { present: false, pciAddress: device.toLowerCase() };
    const netdev = list(join(dir, 'net'))[0];
    return {
      present: true,
      ...pciFacts(root, dir),
      pciAddress: device.toLowerCase(),
      ...definedFields({ interfaceName: netdev || undefined }),
    };
  }
  const netDir = join(root, 'class', 'net', device);
  if (realpath(netDir) === undefined) return { present: false, interfaceName: device };
  // A netdev on a PCI function has a `device` link into the PCI tree; a veth or dummy has none.
  const parent = realpath(join(netDir, 'device'));
  const onPci = parent !== undefined && realpath(join(parent, 'subsystem'))?.endsWith('/bus/pci') === true;
  return { present: true, interfaceName: device, ...(onPci ? pciFacts(root, parent) : {}) };
}
