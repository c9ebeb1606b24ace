/** The cluster-wide IPAM configs: `plexus`, and Whereabouts' taken as they are. */
import { z } from 'zod';
import { formatCidr, formatIp, networkOf, parseCidr } from '../common/ip';
import type { ClusterIpamConfig } from './config';
import { dnsShape, fail, parseDns, parseExcludes, parseRoutes, rangeShape, routeShape } from './config-fields';
import { checkSets, compileRange, rangeToConfig } from './ranges';
import { definedFields } from '../common/defined-fields';

const blockPrefixShape = z.number().int().min(1).max(128);
export const plexusShape = z.looseObject({
  type: z.literal('plexus'),
  pool: z
    .string()
    .regex(/^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$/, 'must be a DNS-1123 name of at most 63 characters')
    .optional(),
  ranges: z.array(z.array(rangeShape)).min(1),
  exclude: z.array(z.string()).optional(),
  blockSize: z.looseObject({ v4: blockPrefixShape.optional(), v6: blockPrefixShape.optional() }).optional(),
  routes: z.array(routeShape).optional(),
  dns: dnsShape.optional(),
});
/** Whereabouts' keys (its README), so its NADs move over unchanged; its datastore and kubernetes keys are ignored. */
export const whereaboutsShape = z.looseObject({
  type: z.literal('whereabouts'),
  range: z.string().optional(),
  range_start: z.string().optional(),
  range_end: z.string().optional(),
  gateway: z.string().optional(),
  exclude: z.array(z.string()).optional(),
  ipRanges: z
    .array(
      z.looseObject({
        range: z.string(),
        range_start: z.string().optional(),
        range_end: z.string().optional(),
        exclude: z.array(z.string()).optional(),
      }),
    )
    .optional(),
  network_name: z.string().optional(),
  routes: z.array(routeShape).optional(),
  dns: dnsShape.optional(),
});

const DEFAULT_BLOCK_PREFIX = { v4: 26, v6: 122 } as const;

export function parsePlexus(shape: z.infer<typeof plexusShape>): ClusterIpamConfig {
  const sets = shape.ranges.map((set, i) => {
    const path = `ipam.ranges[${i}]`;
    if (set.length === 0) fail(path, 'a range set must contain at least one range');
    return { path, ranges: set.map((range, j) => compileRange(`${path}[${j}]`, range.subnet, range)) };
  });
  checkSets(sets);
  const v4 = shape.blockSize?.v4 ?? DEFAULT_BLOCK_PREFIX.v4;
  if (v4 > 32) fail('ipam.blockSize.v4', `/${v4} is not an IPv4 prefix length`);
  return {
    type: 'cluster',
    flavour: 'plexus',
    ...definedFields({ pool: shape.pool }),
    ranges: sets.map((set) => set.ranges.map(rangeToConfig)),
    exclude: parseExcludes('ipam.exclude', shape.exclude),
    blockPrefix: { v4, v6: shape.blockSize?.v6 ?? DEFAULT_BLOCK_PREFIX.v6 },
    routes: parseRoutes(shape.routes),
    ...(shape.dns !== undefined ? { dns: parseDns(shape.dns) } : {}),
  };
}

/**
 * Whereabouts: `range` is a CIDR whose host bits, if set, are where the range starts ("10.1.0.64/24"), or
 * "first-last/prefix"; `ipRanges` adds more ranges, each its own range set (dual stack). The pool is named by
 * `network_name` if given, else by the ranges, as Whereabouts names its IPPools, so NADs with the same range share it.
 */
export function parseWhereabouts(shape: z.infer<typeof whereaboutsShape>): ClusterIpamConfig {
  const entries = [
    ...(shape.range !== undefined
      ? [{ path: 'ipam', range: shape.range, start: shape.range_start, end: shape.range_end, gateway: shape.gateway }]
      : []),
    ...(shape.ipRanges ?? []).map((r, i) => ({
      path: `ipam.ipRanges[${i}]`,
      range: r.range,
      start: r.range_start,
      end: r.range_end,
      gateway: undefined,
    })),
  ];
  if (entries.length === 0) fail('ipam.range', 'is required (or ipam.ipRanges)');
  const sets = entries.map((entry) => {
    const dash = /^([^-/]+)-([^/]+)\/(\d+)$/.exec(entry.range);
    const cidr = parseCidr(dash ? `${dash[1]}/${dash[3]}` : entry.range);
    if (cidr === undefined) return fail(`${entry.path}.range`, `${JSON.stringify(entry.range)} is not a valid CIDR`);
    const implicitStart = dash
      ? dash[1]
      : cidr.value !== networkOf(cidr)
        ? formatIp(cidr.family, cidr.value)
        : undefined;
    const start = entry.start ?? implicitStart;
    const end = entry.end ?? dash?.[2];
    const fields = definedFields({ rangeStart: start, rangeEnd: end, gateway: entry.gateway });
    return {
      path: entry.path,
      ranges: [compileRange(entry.path, formatCidr(cidr.family, networkOf(cidr), cidr.prefix), fields)],
    };
  });
  checkSets(sets);
  const exclude = [
    ...parseExcludes('ipam.exclude', shape.exclude),
    ...(shape.ipRanges ?? []).flatMap((r, i) => parseExcludes(`ipam.ipRanges[${i}].exclude`, r.exclude)),
  ];
  const ranges = sets.map((set) => set.ranges.map(rangeToConfig));
  const byRange = ranges
    .flat()
    .map((r) => r.subnet.replace(/[:/]/g, '-'))
    .join('.');
  return {
    type: 'cluster',
    flavour: 'whereabouts',
    pool: shape.network_name !== undefined && shape.network_name !== '' ? `${shape.network_name}` : byRange,
    ranges,
    exclude,
    blockPrefix: DEFAULT_BLOCK_PREFIX,
    routes: parseRoutes(shape.routes),
    ...(shape.dns !== undefined ? { dns: parseDns(shape.dns) } : {}),
  };
}
