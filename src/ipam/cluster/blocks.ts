/**
 * The pool/block model, pure: a cluster IPAM config is a pool of range sets; each range is cut into blocks aligned on
 * the block prefix (a /26 holds 64 addresses), and a block's allocatable addresses are those of its range that are
 * neither excluded nor the gateway, network or broadcast address. Blocks are enumerated lazily (an IPv6 /64 has 2^58
 * blocks of /122) and named deterministically, so two nodes claiming the same block create the same object name and
 * the API server lets exactly one of them have it.
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { type Cidr, type Family, type Ip, bitsOf, formatCidr, formatIp, parseCidr, parseIp } from '../../common/ip';
import type { ClusterIpamConfig, IpRange } from '../config';
import { type CompiledRange, allocatableCount, compileRanges, isAllocatable } from '../ranges';

/** One block of the pool: its CIDR and the part of it that is allocatable, as host-local ranges. */
export interface PoolBlock {
  /** The block's object name in the API: `<pool>.<cidr with : and / as ->`. */
  readonly name: string;
  readonly cidr: string;
  /** The range set it belongs to (one address per set per attachment). */
  readonly set: number;
  /** Host-local ranges (subnet, rangeStart, rangeEnd, gateway of the pool's subnet), the excluded addresses cut out. */
  readonly ranges: readonly IpRange[];
  readonly size: bigint;
}

export interface PoolLayout {
  /** The pool's object name in the API. */
  readonly name: string;
  readonly sets: readonly (readonly CompiledRange[])[];
  readonly excluded: readonly Cidr[];
  readonly blockPrefix: { readonly v4: number; readonly v6: number };
}

const invalid = (message: string): CniError => new CniError(CniCode.InvalidNetworkConfig, message);

/** A DNS-1123 subdomain made of `text`: lower case, other characters as '-', and a hash suffix when it had to change. */
export function objectName(text: string): string {
  const clean = text
    .toLowerCase()
    .replace(/[^a-z0-9.-]/g, '-')
    .replace(/^[^a-z0-9]+/, '')
    .replace(/[^a-z0-9]+$/, '');
  if (clean === text && clean.length > 0 && clean.length <= 200) return clean;
  let hash = 0x811c9dc5;
  for (const ch of text) hash = Math.imul(hash ^ ch.charCodeAt(0), 0x01000193) >>> 0;
  return `${clean.slice(0, 180) || 'pool'}-${hash.toString(16).padStart(8, '0')}`;
}

/** The pool behind a config: named by `pool` (Whereabouts' network_name), else by the network. */
export function poolLayout(network: string, config: ClusterIpamConfig): Result<PoolLayout> {
  const sets = compileRanges(config);
  if (!sets.ok) return sets;
  const excluded = config.exclude.map((text) => parseCidr(text)).filter((c): c is Cidr => c !== undefined);
  return ok({ name: objectName(config.pool ?? network), sets: sets.value, excluded, blockPrefix: config.blockPrefix });
}

const blockBits = (layout: PoolLayout, range: CompiledRange): number =>
  bitsOf(range.subnet.family) -
  Math.max(range.subnet.prefix, range.subnet.family === 4 ? layout.blockPrefix.v4 : layout.blockPrefix.v6);

function excludedInterval(cidr: Cidr): [bigint, bigint] {
  const host = (1n << BigInt(bitsOf(cidr.family) - cidr.prefix)) - 1n;
  return [cidr.value & ~host, (cidr.value & ~host) | host];
}

/** The block of `range` that starts at `start` (aligned), or undefined when nothing in it is allocatable. */
function blockAt(layout: PoolLayout, set: number, range: CompiledRange, start: bigint): PoolBlock | undefined {
  const bits = blockBits(layout, range);
  const end = start + (1n << BigInt(bits)) - 1n;
  let pieces: [bigint, bigint][] = [[start > range.start ? start : range.start, end < range.end ? end : range.end]];
  for (const cidr of layout.excluded) {
    if (cidr.family !== range.subnet.family) continue;
    const [xs, xe] = excludedInterval(cidr);
    pieces = pieces.flatMap(([s, e]): [bigint, bigint][] =>
      xe < s || xs > e
        ? [[s, e]]
        : [
            ...(xs > s ? [[s, xs - 1n] as [bigint, bigint]] : []),
            ...(xe < e ? [[xe + 1n, e] as [bigint, bigint]] : []),
          ],
    );
  }
  const { family, prefix } = range.subnet;
  const compiled = pieces.filter(([s, e]) => s <= e).map(([s, e]): CompiledRange => ({ ...range, start: s, end: e }));
  const size = compiled.reduce((sum, r) => sum + allocatableCount(r), 0n);
  if (size === 0n) return undefined;
  const cidr = formatCidr(family, start, bitsOf(family) - bits);
  const subnet = formatCidr(family, range.subnet.value, prefix);
  return {
    name: `${layout.name}.${cidr.replace(/[:/]/g, '-')}`,
    cidr,
    set,
    size,
    ranges: compiled.map((r) => ({
      subnet,
      rangeStart: formatIp(family, r.start),
      rangeEnd: formatIp(family, r.end),
      gateway: formatIp(family, r.gateway),
    })),
  };
}

/** Every block of a range set, in address order, lazily; `from` rotates the start so nodes spread out. */
export function* blocksOf(layout: PoolLayout, set: number, from = 0n): Generator<PoolBlock> {
  const ranges = layout.sets[set] ?? [];
  const starts = ranges.map((range) => {
    const step = 1n << BigInt(blockBits(layout, range));
    const first = range.start - (range.start % step);
    return { range, step, first, count: (range.end - first) / step + 1n };
  });
  const total = starts.reduce((sum, s) => sum + s.count, 0n);
  if (total === 0n) return;
  for (let i = 0n; i < total; i++) {
    let k = (from + i) % total;
    for (const s of starts) {
      if (k >= s.count) {
        k -= s.count;
        continue;
      }
      const block = blockAt(layout, set, s.range, s.first + k * s.step);
      if (block !== undefined) yield block;
      break;
    }
  }
}

/** The block holding `ip` and whether the address is one the pool may hand out. */
export function blockOf(layout: PoolLayout, ip: Ip): Result<PoolBlock> {
  for (const [set, ranges] of layout.sets.entries()) {
    for (const range of ranges) {
      if (range.subnet.family !== ip.family || ip.value < range.start || ip.value > range.end) continue;
      const text = formatIp(ip.family, ip.value);
      if (!isAllocatable(range, ip.value))
        return err(invalid(`requested IP ${text} is the gateway, network or broadcast address of pool ${layout.name}`));
      if (
        layout.excluded.some(
          (c) => c.family === ip.family && excludedInterval(c)[0] <= ip.value && ip.value <= excludedInterval(c)[1],
        )
      ) {
        return err(invalid(`requested IP ${text} is excluded from pool ${layout.name}`));
      }
      const step = 1n << BigInt(blockBits(layout, range));
      const block = blockAt(layout, set, range, ip.value - (ip.value % step));
      if (block !== undefined) return ok(block);
    }
  }
  return err(invalid(`requested IP ${formatIp(ip.family, ip.value)} is not in pool ${layout.name}`));
}

/** The pool's block with this CIDR (a held block read back from the API), if the pool has one. */
export function blockByCidr(layout: PoolLayout, text: string): PoolBlock | undefined {
  const cidr = parseCidr(text);
  if (cidr === undefined) return undefined;
  for (const [set, ranges] of layout.sets.entries()) {
    for (const range of ranges) {
      if (range.subnet.family !== cidr.family || bitsOf(cidr.family) - blockBits(layout, range) !== cidr.prefix)
        continue;
      const end = cidr.value + (1n << BigInt(blockBits(layout, range))) - 1n;
      if (end < range.start || cidr.value > range.end) continue;
      const block = blockAt(layout, set, range, cidr.value);
      if (block !== undefined) return block;
    }
  }
  return undefined;
}

/** Whether two pools share an address: what makes a second pool on the same addresses refused. */
export function poolsOverlap(
  a: readonly (readonly IpRange[])[],
  b: readonly (readonly IpRange[])[],
): IpRange | undefined {
  const ca = compileRanges({ ranges: a });
  const cb = compileRanges({ ranges: b });
  if (!ca.ok || !cb.ok) return undefined;
  for (const x of ca.value.flat()) {
    for (const y of cb.value.flat()) {
      if (x.subnet.family === y.subnet.family && x.start <= y.end && y.start <= x.end)
        return b.flat()[cb.value.flat().indexOf(y)];
    }
  }
  return undefined;
}

/** A stable per-node offset into a set's blocks, so nodes starting together do not all race for the first block. */
export function spreadOf(node: string): bigint {
  let hash = 0;
  for (const ch of node) hash = (Math.imul(hash, 31) + ch.charCodeAt(0)) >>> 0;
  return BigInt(hash % 4096) * 7n;
}

export const familyOf = (block: PoolBlock): Family => (block.cidr.includes(':') ? 6 : 4);

/**
 * A block's host-local ranges less some addresses (those IPAMClaims own): each range is cut around them, and a range
 * left with nothing is dropped. The gateway and subnet stay the range's.
 */
export function withoutAddresses(ranges: readonly IpRange[], addresses: readonly string[]): IpRange[] {
  if (addresses.length === 0) return [...ranges];
  const out: IpRange[] = [];
  for (const range of ranges) {
    const start = range.rangeStart !== undefined ? parseIp(range.rangeStart) : undefined;
    const end = range.rangeEnd !== undefined ? parseIp(range.rangeEnd) : undefined;
    if (start === undefined || end === undefined) {
      out.push(range);
      continue;
    }
    const cut = addresses
      .map((text) => parseIp(text))
      .filter(
        (ip): ip is Ip =>
          ip !== undefined && ip.family === start.family && ip.value >= start.value && ip.value <= end.value,
      )
      .map((ip) => ip.value)
      .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    // A piece holding only never-allocated addresses (the gateway, network or broadcast address) is no range at all.
    const subnet = parseCidr(range.subnet);
    const gateway = range.gateway !== undefined ? parseIp(range.gateway)?.value : undefined;
    const never =
      subnet === undefined ? [] : [...excludedInterval(subnet), ...(gateway !== undefined ? [gateway] : [])];
    const never4 = start.family === 4 ? never : never.filter((_, i) => i !== 1);
    const hasAllocatable = (s: bigint, e: bigint): boolean =>
      e - s + 1n > BigInt(new Set(never4.filter((v) => v >= s && v <= e)).size);
    let from = start.value;
    for (const value of [...cut, end.value + 1n]) {
      if (value > from && hasAllocatable(from, value - 1n))
        out.push({ ...range, rangeStart: formatIp(start.family, from), rangeEnd: formatIp(start.family, value - 1n) });
      if (value + 1n > from) from = value + 1n;
    }
  }
  return out;
}
