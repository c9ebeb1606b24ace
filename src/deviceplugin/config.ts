/**
 * The resources plexusd offers the kubelet (--device-plugin-config FILE, YAML or JSON), validated once at start:
 *
 *   resources:
 *     - name: plexus.io/memif        # a count of memif sockets
 *       kind: memif
 *       count: 16
 *     - name: plexus.io/fastnic      # a pool of host devices: interface names or PCI addresses
 *       kind: host-device
 *       devices: [eth3, "0000:03:00.1"]
 *       offer: [device-plugin, dra]  # how the kubelet gets it (default: device-plugin; dra: docs/dra.md)
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { absolutePath } from '../common/absolute-path';
import { PCI_ADDRESS } from '../common/pci-address';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { errorMessage } from '../common/error-message';

const IFNAME = /^[^\s/:]{1,15}$/;

/** Extended resource names: a domain prefix other than kubernetes.io, a slash, a name (what the kubelet accepts). */
const resourceName = z
  .string()
  .regex(
    /^(?=.{1,253}\/)[a-z0-9]([-a-z0-9.]*[a-z0-9])?\/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/,
    'must be domain/name, e.g. plexus.io/memif',
  )
  .refine((n) => !/(^|\.)kubernetes\.io\//.test(n), 'the kubernetes.io domain is reserved');

/** How a resource reaches pods: the kubelet's device-plugin API, DRA ResourceSlices of driver plexus.io, or both. */
export const OFFERS = ['device-plugin', 'dra'] as const;
export type Offer = (typeof OFFERS)[number];
const offer = z
  .array(z.enum(OFFERS))
  .min(1, 'must name at least one of device-plugin, dra')
  .refine((o) => new Set(o).size === o.length, 'names an offer twice')
  .optional(); // absent: device-plugin (offers() below)

const MemifResourceSchema = z.strictObject({
  name: resourceName,
  kind: z.literal('memif'),
  count: z.number().int().min(1).max(4096),
  /** Where each device's socket directory is made on the host (one subdirectory per device). */
  socketDir: absolutePath().default('/run/plexus/memif'),
  /** Where that directory appears in the container. */
  containerPath: absolutePath().default('/run/memif'),
  /** memif mode written to device-info: ethernet, ip or punt (NPWG names). */
  mode: z.enum(['ethernet', 'ip', 'punt']).default('ethernet'),
  /**
   * Devices are healthy only while the node's userspace switch (plexusd's --ovsdb-socket) answers with DPDK
   * initialised, so the scheduler sends no memif pod to a node whose switch is down.
   */
  healthFromSwitch: z.boolean().default(false),
  offer,
});

const HostDeviceResourceSchema = z.strictObject({
  name: resourceName,
  kind: z.literal('host-device'),
  devices: z
    .array(
      z
        .string()
        .refine(
          (d) => PCI_ADDRESS.test(d) || IFNAME.test(d),
          'must be a host interface name or a PCI address like 0000:3b:00.1',
        ),
    )
    .min(1)
    .refine((ds) => new Set(ds.map((d) => d.toLowerCase())).size === ds.length, 'lists a device twice'),
  offer,
});

const ResourcesSchema = z.strictObject({
  resources: z
    .array(z.discriminatedUnion('kind', [MemifResourceSchema, HostDeviceResourceSchema]))
    .refine((rs) => new Set(rs.map((r) => r.name)).size === rs.length, 'names a resource twice'),
});

export type MemifResource = z.infer<typeof MemifResourceSchema>;
export type HostDeviceResource = z.infer<typeof HostDeviceResourceSchema>;
export type ResourceConfig = MemifResource | HostDeviceResource;

/** The configuration document, already read. */
export function parseResources(doc: unknown, where = 'the device plugin config'): Result<ResourceConfig[]> {
  const r = ResourcesSchema.safeParse(doc);
  if (r.success) {
    const overlap = pciOrNameOverlap(r.data.resources);
    if (overlap)
      return err(
        new CniError(CniCode.InvalidNetworkConfig, `${where}: device ${overlap} is in more than one host-device pool`),
      );
    return ok(r.data.resources);
  }
  const issue = r.error.issues[0];
  return err(
    new CniError(
      CniCode.InvalidNetworkConfig,
      `${where}: ${issue?.path.join('.') || '(top)'}: ${issue?.message ?? 'invalid'}`,
    ),
  );
}

/** Whether a resource is offered one way (device-plugin or dra). */
export const offers = (resource: ResourceConfig, how: Offer): boolean =>
  (resource.offer ?? ['device-plugin']).includes(how);

export function loadResources(file: string): Result<ResourceConfig[]> {
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(file, 'utf8'));
  } catch (e) {
    return err(new CniError(CniCode.IoFailure, `cannot read the device plugin config ${file}: ${errorMessage(e)}`));
  }
  return parseResources(doc, file);
}

function pciOrNameOverlap(resources: readonly ResourceConfig[]): string | undefined {
  const seen = new Set<string>();
  for (const r of resources) {
    if (r.kind !== 'host-device') continue;
    for (const d of r.devices) {
      const key = d.toLowerCase();
      if (seen.has(key)) return d;
      seen.add(key);
    }
  }
  return undefined;
}
