/** The node-local IPAM configs, as the reference plugins take them: `host-local` and `static`. */
import { resolve } from 'node:path';
import { z } from 'zod';
import { familyName, formatCidr, formatIp, parseCidr, parseIp } from '../common/ip';
import type { IpamConfig } from './config';
import { dnsShape, fail, parseDns, parseRoutes, rangeShape, routeShape } from './config-fields';
import { type CompiledRange, checkSets, compileRange, rangeToConfig } from './ranges';

export const hostLocalShape = z.looseObject({
  type: z.literal('host-local'),
  ranges: z.array(z.array(rangeShape)).optional(),
  // The legacy single-range form: the fields of one range at the top level of `ipam`.
  subnet: z.string().optional(),
  rangeStart: z.string().optional(),
  rangeEnd: z.string().optional(),
  gateway: z.string().optional(),
  routes: z.array(routeShape).optional(),
  dns: dnsShape.optional(),
  // Where the reference plugin keeps leases: native leases are written there too (host-local-dir.ts).
  dataDir: z.string().optional(),
  // Accepted for compatibility and ignored: DNS comes from `dns`.
  resolvConf: z.string().optional(),
});
export const staticShape = z.looseObject({
  type: z.literal('static'),
  addresses: z.array(z.looseObject({ address: z.string(), gateway: z.string().optional() })).optional(),
  routes: z.array(routeShape).optional(),
  dns: dnsShape.optional(),
});

export function parseHostLocal(shape: z.infer<typeof hostLocalShape>): IpamConfig {
  const sets: { path: string; ranges: CompiledRange[] }[] = [];
  if (shape.subnet !== undefined) {
    sets.push({ path: 'ipam', ranges: [compileRange('ipam', shape.subnet, shape)] });
  } else {
    for (const field of ['rangeStart', 'rangeEnd', 'gateway'] as const) {
      if (shape[field] !== undefined)
        fail(`ipam.${field}`, 'is set but ipam.subnet is not (use ipam.ranges, or set ipam.subnet)');
    }
  }
  (shape.ranges ?? []).forEach((set, i) => {
    const path = `ipam.ranges[${i}]`;
    if (set.length === 0) fail(path, 'a range set must contain at least one range');
    sets.push({ path, ranges: set.map((range, j) => compileRange(`${path}[${j}]`, range.subnet, range)) });
  });
  if (sets.length === 0) fail('ipam.ranges', 'at least one range is required (ipam.ranges or ipam.subnet)');

  checkSets(sets);
  return {
    type: 'host-local',
    ranges: sets.map((set) => set.ranges.map(rangeToConfig)),
    routes: parseRoutes(shape.routes),
    ...(shape.dns !== undefined ? { dns: parseDns(shape.dns) } : {}),
    ...(shape.dataDir !== undefined && shape.dataDir !== '' ? { dataDir: resolve('/', shape.dataDir) } : {}),
  };
}

export function parseStatic(shape: z.infer<typeof staticShape>): IpamConfig {
  const addresses = (shape.addresses ?? []).map((entry, i) => {
    const path = `ipam.addresses[${i}]`;
    const address = parseCidr(entry.address);
    if (address === undefined) return fail(`${path}.address`, `${JSON.stringify(entry.address)} is not a valid CIDR`);
    // As the static plugin: the address keeps its host bits, it is the interface's own address.
    const canonical = formatCidr(address.family, address.value, address.prefix);
    if (entry.gateway === undefined) return { address: canonical };
    const gateway = parseIp(entry.gateway);
    if (gateway === undefined)
      return fail(`${path}.gateway`, `${JSON.stringify(entry.gateway)} is not a valid IP address`);
    if (gateway.family !== address.family) {
      fail(
        `${path}.gateway`,
        `${entry.gateway} is ${familyName(gateway.family)} but address ${entry.address} is ${familyName(address.family)}`,
      );
    }
    return { address: canonical, gateway: formatIp(gateway.family, gateway.value) };
  });
  return {
    type: 'static',
    addresses,
    routes: parseRoutes(shape.routes),
    ...(shape.dns !== undefined ? { dns: parseDns(shape.dns) } : {}),
  };
}
