/**
 * The `ipam` section of a network config, validated once into precise types.
 * Accepts the schemas of the reference `host-local` and `static` plugins so that existing
 * network definitions work unchanged; unknown keys are allowed, as CNI configs carry many.
 */
import { fieldPath } from '../common/schema-issues';
import { z } from 'zod';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { type Cidr, contains, familyName, formatCidr, formatIp, lastOf, networkOf, parseCidr, parseIp } from '../common/ip';

/** One range of a range set; after parsing every field is filled in and canonical. */
export interface IpRange {
  readonly subnet: string;
  readonly rangeStart?: string;
  readonly rangeEnd?: string;
  readonly gateway?: string;
}
export interface RouteSpec {
  readonly dst: string;
  readonly gw?: string;
}
export interface DnsSpec {
  readonly nameservers?: readonly string[];
  readonly domain?: string;
  readonly search?: readonly string[];
  readonly options?: readonly string[];
}
export type IpamConfig =
  | { readonly type: 'host-local'; readonly ranges: readonly (readonly IpRange[])[]; readonly routes: readonly RouteSpec[]; readonly dns?: DnsSpec }
  | {
      readonly type: 'static';
      readonly addresses: readonly { readonly address: string; readonly gateway?: string }[];
      readonly routes: readonly RouteSpec[];
      readonly dns?: DnsSpec;
    }
  | ClusterIpamConfig;

/**
 * Cluster-wide IPAM (`plexus`, or a Whereabouts config taken as it is): a pool on the Kubernetes API, split into
 * blocks that nodes claim. `ranges` are host-local's range sets (one address per set); `exclude` are CIDRs never
 * handed out; `pool` names the pool (Whereabouts' network_name), so several networks may share one.
 */
export interface ClusterIpamConfig {
  readonly type: 'cluster';
  readonly flavour: 'plexus' | 'whereabouts';
  readonly pool?: string;
  readonly ranges: readonly (readonly IpRange[])[];
  readonly exclude: readonly string[];
  /** Prefix length of a block, per family: a node claims addresses this many at a time. */
  readonly blockPrefix: { readonly v4: number; readonly v6: number };
  readonly routes: readonly RouteSpec[];
  readonly dns?: DnsSpec;
}

const rangeShape = z.looseObject({
  subnet: z.string(),
  rangeStart: z.string().optional(),
  rangeEnd: z.string().optional(),
  gateway: z.string().optional(),
});
const routeShape = z.looseObject({ dst: z.string(), gw: z.string().optional() });
const dnsShape = z.looseObject({
  nameservers: z.array(z.string()).optional(),
  domain: z.string().optional(),
  search: z.array(z.string()).optional(),
  options: z.array(z.string()).optional(),
});
const hostLocalShape = z.looseObject({
  type: z.literal('host-local'),
  ranges: z.array(z.array(rangeShape)).optional(),
  // The legacy single-range form: the fields of one range at the top level of `ipam`.
  subnet: z.string().optional(),
  rangeStart: z.string().optional(),
  rangeEnd: z.string().optional(),
  gateway: z.string().optional(),
  routes: z.array(routeShape).optional(),
  dns: dnsShape.optional(),
  // Accepted for compatibility and ignored: Plexus keeps leases in its own store and takes DNS from `dns`.
  dataDir: z.string().optional(),
  resolvConf: z.string().optional(),
});
const staticShape = z.looseObject({
  type: z.literal('static'),
  addresses: z.array(z.looseObject({ address: z.string(), gateway: z.string().optional() })).optional(),
  routes: z.array(routeShape).optional(),
  dns: dnsShape.optional(),
});

const blockPrefixShape = z.number().int().min(1).max(128);
const plexusShape = z.looseObject({
  type: z.literal('plexus'),
  pool: z.string().regex(/^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$/, 'must be a DNS-1123 name of at most 63 characters').optional(),
  ranges: z.array(z.array(rangeShape)).min(1),
  exclude: z.array(z.string()).optional(),
  blockSize: z.looseObject({ v4: blockPrefixShape.optional(), v6: blockPrefixShape.optional() }).optional(),
  routes: z.array(routeShape).optional(),
  dns: dnsShape.optional(),
});
/** Whereabouts' keys (its README), so its NADs move over unchanged; its datastore and kubernetes keys are ignored. */
const whereaboutsShape = z.looseObject({
  type: z.literal('whereabouts'),
  range: z.string().optional(),
  range_start: z.string().optional(),
  range_end: z.string().optional(),
  gateway: z.string().optional(),
  exclude: z.array(z.string()).optional(),
  ipRanges: z.array(z.looseObject({ range: z.string(), range_start: z.string().optional(), range_end: z.string().optional(), exclude: z.array(z.string()).optional() })).optional(),
  network_name: z.string().optional(),
  routes: z.array(routeShape).optional(),
  dns: dnsShape.optional(),
});

/** Thrown inside this module only, turned into a Result by parseIpamConfig. */
class ConfigError extends Error {}

const fail = (path: string, message: string): never => {
  throw new ConfigError(`${path}: ${message}`);
};

function shapeOf<T>(schema: z.ZodType<T>, raw: unknown): T {
  const parsed = schema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  return fail(fieldPath(issue?.path ?? [], 'ipam'), issue?.message ?? 'invalid');
}

/**
 * Validates the `ipam` object of a network config.
 * Errors are CniCode.InvalidNetworkConfig (7) with a message naming the bad field,
 * e.g. `ipam.ranges[0][1].subnet: "10.1.0.0/33" is not a valid CIDR`.
 */
export function parseIpamConfig(raw: unknown): Result<IpamConfig> {
  try {
    return ok(parseOrThrow(raw));
  } catch (thrown) {
    if (thrown instanceof ConfigError) return err(new CniError(CniCode.InvalidNetworkConfig, thrown.message));
    throw thrown;
  }
}

function parseOrThrow(raw: unknown): IpamConfig {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return fail('ipam', 'must be an object');
  const type = (raw as { type?: unknown }).type;
  if (type === undefined) return fail('ipam.type', 'is required');
  if (type === 'host-local') return parseHostLocal(shapeOf(hostLocalShape, raw));
  if (type === 'static') return parseStatic(shapeOf(staticShape, raw));
  if (type === 'plexus') return parsePlexus(shapeOf(plexusShape, raw));
  if (type === 'whereabouts') return parseWhereabouts(shapeOf(whereaboutsShape, raw));
  return fail('ipam.type', `${JSON.stringify(type)} is not supported by the built-in IPAM (expected "host-local", "static", "plexus" or "whereabouts")`);
}

/** A range with its bounds as integers; what the allocator works on. */
export interface CompiledRange {
  readonly path: string;
  readonly subnet: Cidr;
  readonly start: bigint;
  readonly end: bigint;
  readonly gateway: bigint;
}

function parseHostLocal(shape: z.infer<typeof hostLocalShape>): IpamConfig {
  const sets: { path: string; ranges: CompiledRange[] }[] = [];
  if (shape.subnet !== undefined) {
    sets.push({ path: 'ipam', ranges: [compileRange('ipam', shape.subnet, shape)] });
  } else {
    for (const field of ['rangeStart', 'rangeEnd', 'gateway'] as const) {
      if (shape[field] !== undefined) fail(`ipam.${field}`, 'is set but ipam.subnet is not (use ipam.ranges, or set ipam.subnet)');
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
  };
}

/** Every range of a set is of one family, and no two ranges overlap (within a set or across sets). */
function checkSets(sets: readonly { readonly path: string; readonly ranges: readonly CompiledRange[] }[]): void {
  for (const set of sets) {
    const first = set.ranges[0];
    for (const range of set.ranges) {
      if (first !== undefined && range.subnet.family !== first.subnet.family) {
        fail(`${range.path}.subnet`, `${familyName(range.subnet.family)} subnet in a range set of ${familyName(first.subnet.family)} ranges (all ranges of a set must be one IP family)`);
      }
    }
  }
  const all = sets.flatMap((set) => set.ranges);
  all.forEach((range, i) => {
    for (const earlier of all.slice(0, i)) {
      if (earlier.subnet.family === range.subnet.family && range.start <= earlier.end && earlier.start <= range.end) {
        fail(range.path, `range ${describeRange(range)} overlaps ${earlier.path} (${describeRange(earlier)})`);
      }
    }
  });

}

const DEFAULT_BLOCK_PREFIX = { v4: 26, v6: 122 } as const;

function parsePlexus(shape: z.infer<typeof plexusShape>): ClusterIpamConfig {
  const sets = shape.ranges.map((set, i) => {
    const path = `ipam.ranges[${i}]`;
    if (set.length === 0) fail(path, 'a range set must contain at least one range');
    return { path, ranges: set.map((range, j) => compileRange(`${path}[${j}]`, range.subnet, range)) };
  });
  checkSets(sets);
  const v4 = shape.blockSize?.v4 ?? DEFAULT_BLOCK_PREFIX.v4;
  if (v4 > 32) fail('ipam.blockSize.v4', `/${v4} is not an IPv4 prefix length`);
  return {
    type: 'cluster', flavour: 'plexus', ...(shape.pool !== undefined ? { pool: shape.pool } : {}),
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
function parseWhereabouts(shape: z.infer<typeof whereaboutsShape>): ClusterIpamConfig {
  const entries = [
    ...(shape.range !== undefined ? [{ path: 'ipam', range: shape.range, start: shape.range_start, end: shape.range_end, gateway: shape.gateway }] : []),
    ...(shape.ipRanges ?? []).map((r, i) => ({ path: `ipam.ipRanges[${i}]`, range: r.range, start: r.range_start, end: r.range_end, gateway: undefined })),
  ];
  if (entries.length === 0) fail('ipam.range', 'is required (or ipam.ipRanges)');
  const sets = entries.map((entry) => {
    const dash = /^([^-/]+)-([^/]+)\/(\d+)$/.exec(entry.range);
    const cidr = parseCidr(dash ? `${dash[1]}/${dash[3]}` : entry.range);
    if (cidr === undefined) return fail(`${entry.path}.range`, `${JSON.stringify(entry.range)} is not a valid CIDR`);
    const implicitStart = dash ? dash[1] : cidr.value !== networkOf(cidr) ? formatIp(cidr.family, cidr.value) : undefined;
    const start = entry.start ?? implicitStart;
    const end = entry.end ?? dash?.[2];
    const fields = { ...(start !== undefined ? { rangeStart: start } : {}), ...(end !== undefined ? { rangeEnd: end } : {}), ...(entry.gateway !== undefined ? { gateway: entry.gateway } : {}) };
    return { path: entry.path, ranges: [compileRange(entry.path, formatCidr(cidr.family, networkOf(cidr), cidr.prefix), fields)] };
  });
  checkSets(sets);
  const exclude = [...parseExcludes('ipam.exclude', shape.exclude), ...(shape.ipRanges ?? []).flatMap((r, i) => parseExcludes(`ipam.ipRanges[${i}].exclude`, r.exclude))];
  const ranges = sets.map((set) => set.ranges.map(rangeToConfig));
  const byRange = ranges.flat().map((r) => r.subnet.replace(/[:/]/g, '-')).join('.');
  return {
    type: 'cluster', flavour: 'whereabouts',
    pool: shape.network_name !== undefined && shape.network_name !== '' ? `${shape.network_name}` : byRange,
    ranges, exclude, blockPrefix: DEFAULT_BLOCK_PREFIX,
    routes: parseRoutes(shape.routes),
    ...(shape.dns !== undefined ? { dns: parseDns(shape.dns) } : {}),
  };
}

function parseExcludes(path: string, exclude: readonly string[] | undefined): string[] {
  return (exclude ?? []).map((text, i) => {
    const cidr = parseCidr(text) ?? (parseIp(text) ? parseCidr(`${text}/${text.includes(':') ? 128 : 32}`) : undefined);
    if (cidr === undefined) return fail(`${path}[${i}]`, `${JSON.stringify(text)} is not a valid CIDR`);
    return formatCidr(cidr.family, networkOf(cidr), cidr.prefix);
  });
}

export function describeRange(range: CompiledRange): string {
  const { family, prefix } = range.subnet;
  return `${formatCidr(family, networkOf(range.subnet), prefix)} ${formatIp(family, range.start)}-${formatIp(family, range.end)}`;
}

function rangeToConfig(range: CompiledRange): IpRange {
  const { family, prefix } = range.subnet;
  return {
    subnet: formatCidr(family, networkOf(range.subnet), prefix),
    rangeStart: formatIp(family, range.start),
    rangeEnd: formatIp(family, range.end),
    gateway: formatIp(family, range.gateway),
  };
}

function compileRange(path: string, subnetText: string, fields: { rangeStart?: string | undefined; rangeEnd?: string | undefined; gateway?: string | undefined }): CompiledRange {
  const parsed = parseCidr(subnetText);
  if (parsed === undefined) return fail(`${path}.subnet`, `${JSON.stringify(subnetText)} is not a valid CIDR`);
  const bits = parsed.family === 4 ? 32 : 128;
  // As host-local: a subnet needs a network address, a gateway and at least one more address.
  if (parsed.prefix > bits - 2) {
    fail(`${path}.subnet`, `${JSON.stringify(subnetText)} has no allocatable addresses (the longest ${familyName(parsed.family)} prefix is /${bits - 2})`);
  }
  const subnet: Cidr = { family: parsed.family, value: networkOf(parsed), prefix: parsed.prefix };
  const inSubnet = (field: 'rangeStart' | 'rangeEnd' | 'gateway'): bigint | undefined => {
    const text = fields[field];
    if (text === undefined) return undefined;
    const ip = parseIp(text);
    if (ip === undefined) return fail(`${path}.${field}`, `${JSON.stringify(text)} is not a valid IP address`);
    if (!contains(subnet, ip)) fail(`${path}.${field}`, `${text} is not in subnet ${formatCidr(subnet.family, subnet.value, subnet.prefix)}`);
    return ip.value;
  };
  const network = subnet.value;
  const last = lastOf(subnet);
  const gateway = inSubnet('gateway') ?? network + 1n;
  const start = inSubnet('rangeStart') ?? network + 1n;
  const end = inSubnet('rangeEnd') ?? (subnet.family === 4 ? last - 1n : last);
  if (start > end) fail(`${path}.rangeStart`, `${formatIp(subnet.family, start)} is after rangeEnd ${formatIp(subnet.family, end)}`);
  const range: CompiledRange = { path, subnet, start, end, gateway };
  if (allocatableCount(range) === 0n) {
    fail(path, `range ${describeRange(range)} has no allocatable address (the gateway, network and broadcast addresses are never allocated)`);
  }
  return range;
}

/** Whether the allocator may hand out this address of the range: never the gateway, the network or the IPv4 broadcast address. */
export function isAllocatable(range: CompiledRange, value: bigint): boolean {
  if (value < range.start || value > range.end || value === range.gateway || value === range.subnet.value) return false;
  return !(range.subnet.family === 4 && value === lastOf(range.subnet));
}

export function allocatableCount(range: CompiledRange): bigint {
  let count = range.end - range.start + 1n;
  const excluded = new Set([range.gateway, range.subnet.value, ...(range.subnet.family === 4 ? [lastOf(range.subnet)] : [])]);
  for (const value of excluded) if (value >= range.start && value <= range.end) count--;
  return count;
}

/** Re-derives the integer form of a host-local config (cheap: a few ranges); fails only for a config that did not come from parseIpamConfig. */
export function compileRanges(config: { readonly ranges: readonly (readonly IpRange[])[] }): Result<readonly (readonly CompiledRange[])[]> {
  try {
    return ok(config.ranges.map((set, i) => set.map((range, j) => compileRange(`ipam.ranges[${i}][${j}]`, range.subnet, range))));
  } catch (thrown) {
    if (thrown instanceof ConfigError) return err(new CniError(CniCode.InvalidNetworkConfig, thrown.message));
    throw thrown;
  }
}

function parseRoutes(routes: readonly z.infer<typeof routeShape>[] | undefined): RouteSpec[] {
  return (routes ?? []).map((route, i) => {
    const path = `ipam.routes[${i}]`;
    const dst = parseCidr(route.dst);
    if (dst === undefined) return fail(`${path}.dst`, `${JSON.stringify(route.dst)} is not a valid CIDR`);
    const canonical = formatCidr(dst.family, networkOf(dst), dst.prefix);
    if (route.gw === undefined) return { dst: canonical };
    const gw = parseIp(route.gw);
    if (gw === undefined) return fail(`${path}.gw`, `${JSON.stringify(route.gw)} is not a valid IP address`);
    if (gw.family !== dst.family) fail(`${path}.gw`, `${route.gw} is ${familyName(gw.family)} but dst ${route.dst} is ${familyName(dst.family)}`);
    return { dst: canonical, gw: formatIp(gw.family, gw.value) };
  });
}

function parseDns(dns: z.infer<typeof dnsShape>): DnsSpec {
  const nameservers = dns.nameservers?.map((text, i) => {
    const ip = parseIp(text);
    if (ip === undefined) return fail(`ipam.dns.nameservers[${i}]`, `${JSON.stringify(text)} is not a valid IP address`);
    return formatIp(ip.family, ip.value);
  });
  return {
    ...(nameservers !== undefined ? { nameservers } : {}),
    ...(dns.domain !== undefined ? { domain: dns.domain } : {}),
    ...(dns.search !== undefined ? { search: dns.search } : {}),
    ...(dns.options !== undefined ? { options: dns.options } : {}),
  };
}

function parseStatic(shape: z.infer<typeof staticShape>): IpamConfig {
  const addresses = (shape.addresses ?? []).map((entry, i) => {
    const path = `ipam.addresses[${i}]`;
    const address = parseCidr(entry.address);
    if (address === undefined) return fail(`${path}.address`, `${JSON.stringify(entry.address)} is not a valid CIDR`);
    // As the static plugin: the address keeps its host bits, it is the interface's own address.
    const canonical = formatCidr(address.family, address.value, address.prefix);
    if (entry.gateway === undefined) return { address: canonical };
    const gateway = parseIp(entry.gateway);
    if (gateway === undefined) return fail(`${path}.gateway`, `${JSON.stringify(entry.gateway)} is not a valid IP address`);
    if (gateway.family !== address.family) {
      fail(`${path}.gateway`, `${entry.gateway} is ${familyName(gateway.family)} but address ${entry.address} is ${familyName(address.family)}`);
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
