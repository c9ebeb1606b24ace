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
    };

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
  return fail('ipam.type', `${JSON.stringify(type)} is not supported by the built-in IPAM (expected "host-local" or "static")`);
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

  return {
    type: 'host-local',
    ranges: sets.map((set) => set.ranges.map(rangeToConfig)),
    routes: parseRoutes(shape.routes),
    ...(shape.dns !== undefined ? { dns: parseDns(shape.dns) } : {}),
  };
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
export function compileRanges(config: Extract<IpamConfig, { type: 'host-local' }>): Result<readonly (readonly CompiledRange[])[]> {
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
