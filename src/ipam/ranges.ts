/** Ranges as integers: compiled from a config, checked against each other, and what the allocator may hand out. */
import {
  type Cidr,
  contains,
  familyName,
  formatCidr,
  formatIp,
  lastOf,
  networkOf,
  parseCidr,
  parseIp,
} from '../common/ip';
import type { Result } from '../cni/errors';
import type { IpRange } from './config';
import { fail, parsed } from './config-fields';

/** A range with its bounds as integers; what the allocator works on. */
export interface CompiledRange {
  readonly path: string;
  readonly subnet: Cidr;
  readonly start: bigint;
  readonly end: bigint;
  readonly gateway: bigint;
}

/** Every range of a set is of one family, and no two ranges overlap (within a set or across sets). */
export function checkSets(sets: readonly { readonly path: string; readonly ranges: readonly CompiledRange[] }[]): void {
  for (const set of sets) {
    const first = set.ranges[0];
    for (const range of set.ranges) {
      if (first !== undefined && range.subnet.family !== first.subnet.family) {
        fail(
          `${range.path}.subnet`,
          `${familyName(range.subnet.family)} subnet in a range set of ${familyName(first.subnet.family)} ranges (all ranges of a set must be one IP family)`,
        );
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

export function describeRange(range: CompiledRange): string {
  const { family, prefix } = range.subnet;
  return `${formatCidr(family, networkOf(range.subnet), prefix)} ${formatIp(family, range.start)}-${formatIp(family, range.end)}`;
}

export function rangeToConfig(range: CompiledRange): IpRange {
  const { family, prefix } = range.subnet;
  return {
    subnet: formatCidr(family, networkOf(range.subnet), prefix),
    rangeStart: formatIp(family, range.start),
    rangeEnd: formatIp(family, range.end),
    gateway: formatIp(family, range.gateway),
  };
}

export function compileRange(
  path: string,
  subnetText: string,
  fields: { rangeStart?: string | undefined; rangeEnd?: string | undefined; gateway?: string | undefined },
): CompiledRange {
  const parsed = parseCidr(subnetText);
  if (parsed === undefined) return fail(`${path}.subnet`, `${JSON.stringify(subnetText)} is not a valid CIDR`);
  const bits = parsed.family === 4 ? 32 : 128;
  // As host-local: a subnet needs a network address, a gateway and at least one more address.
  if (parsed.prefix > bits - 2) {
    fail(
      `${path}.subnet`,
      `${JSON.stringify(subnetText)} has no allocatable addresses (the longest ${familyName(parsed.family)} prefix is /${bits - 2})`,
    );
  }
  const subnet: Cidr = { family: parsed.family, value: networkOf(parsed), prefix: parsed.prefix };
  const inSubnet = (field: 'rangeStart' | 'rangeEnd' | 'gateway'): bigint | undefined => {
    const text = fields[field];
    if (text === undefined) return undefined;
    const ip = parseIp(text);
    if (ip === undefined) return fail(`${path}.${field}`, `${JSON.stringify(text)} is not a valid IP address`);
    if (!contains(subnet, ip))
      fail(`${path}.${field}`, `${text} is not in subnet ${formatCidr(subnet.family, subnet.value, subnet.prefix)}`);
    return ip.value;
  };
  const network = subnet.value;
  const last = lastOf(subnet);
  const gateway = inSubnet('gateway') ?? network + 1n;
  const start = inSubnet('rangeStart') ?? network + 1n;
  const end = inSubnet('rangeEnd') ?? (subnet.family === 4 ? last - 1n : last);
  if (start > end)
    fail(`${path}.rangeStart`, `${formatIp(subnet.family, start)} is after rangeEnd ${formatIp(subnet.family, end)}`);
  const range: CompiledRange = { path, subnet, start, end, gateway };
  if (allocatableCount(range) === 0n) {
    fail(
      path,
      `range ${describeRange(range)} has no allocatable address (the gateway, network and broadcast addresses are never allocated)`,
    );
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
  const excluded = new Set([
    range.gateway,
    range.subnet.value,
    ...(range.subnet.family === 4 ? [lastOf(range.subnet)] : []),
  ]);
  for (const value of excluded) if (value >= range.start && value <= range.end) count--;
  return count;
}

/** Re-derives the integer form of a host-local config (cheap: a few ranges); fails only for a config that did not come from parseIpamConfig. */
export function compileRanges(config: {
  readonly ranges: readonly (readonly IpRange[])[];
}): Result<readonly (readonly CompiledRange[])[]> {
  return parsed(() =>
    config.ranges.map((set, i) => set.map((range, j) => compileRange(`ipam.ranges[${i}][${j}]`, range.subnet, range))),
  );
}
