/**
 * Address allocation with host-local's semantics on top of the embedded lease store:
 * one address per range set, round-robin after the last reserved address, never the
 * gateway, network or broadcast address; idempotent for the same owner; all or nothing.
 */
import type { IpamBackend, IpamRequest, IpamResult } from './backend';
import { CniCode, CniError, type Result, err, ok, toCniError } from '../cni/errors';
import { IPAM_ADDRESS_IN_USE, IPAM_POOL_EXHAUSTED } from './codes';
import type { DnsSpec, IpamConfig } from './config';
import { type CompiledRange, compileRanges, describeRange, isAllocatable } from './ranges';
import { type Ip, formatCidr, formatIp, parseCidr, parseIp } from '../common/ip';
import { KeyedMutex } from '../common/keyed-mutex';
import { claimNeedsClusterPool, clusterNeedsApi } from './errors';
import { type Lease, type StoredLease, isSafeNetworkName } from './lease';
import { LeaseStore, type LeaseStoreOptions } from './store';

type HostLocal = Extract<IpamConfig, { type: 'host-local' }>;
type Static = Extract<IpamConfig, { type: 'static' }>;
type ResultIp = IpamResult['ips'][number];

const invalid = (message: string): CniError => new CniError(CniCode.InvalidNetworkConfig, message);

function checkNetwork(network: string): CniError | undefined {
  return isSafeNetworkName(network)
    ? undefined
    : invalid(
        `network name ${JSON.stringify(network)} cannot be used for IPAM: it must be 1-253 letters, digits, '_', '.' or '-', starting with a letter or digit`,
      );
}

function checkOwner(containerId: string, ifname: string): CniError | undefined {
  for (const [name, value] of [
    ['container ID', containerId],
    ['interface name', ifname],
  ] as const) {
    if (value === '' || /[\r\n\0/]/.test(value)) {
      return new CniError(
        CniCode.InvalidEnvironment,
        `${name} ${JSON.stringify(value)} is not valid for an IPAM lease (empty, or contains a newline, NUL or '/')`,
      );
    }
  }
  return undefined;
}

const inRange = (range: CompiledRange, ip: Ip): boolean =>
  range.subnet.family === ip.family && ip.value >= range.start && ip.value <= range.end;

function describeHolder(lease: Lease): string {
  return lease.containerId === ''
    ? 'a lease file with no valid owner'
    : `container ${lease.containerId} interface ${lease.ifname}`;
}

const withDns = (config: IpamConfig): { dns?: DnsSpec } => (config.dns !== undefined ? { dns: config.dns } : {});

const resultIpOf = (lease: Lease): ResultIp =>
  lease.gateway !== undefined ? { address: lease.address, gateway: lease.gateway } : { address: lease.address };

export class Ipam implements IpamBackend {
  private readonly locks = new KeyedMutex();

  private constructor(private readonly store: LeaseStore) {}

  /** Opens the store in `dir` (<state-dir>/ipam), creating it with mode 0700 if missing (options: LeaseStoreOptions). */
  static async open(dir: string, options: LeaseStoreOptions = {}): Promise<Ipam> {
    return new Ipam(await LeaseStore.open(dir, options));
  }

  async allocate(req: IpamRequest): Promise<Result<IpamResult>> {
    const bad = checkNetwork(req.network) ?? checkOwner(req.containerId, req.ifname);
    if (bad !== undefined) return err(bad);
    if (req.claim !== undefined && req.config.type !== 'cluster')
      return err(claimNeedsClusterPool(req.network, req.config.type));
    if (req.config.type === 'static') return allocateStatic(req.config, req.requestedIps ?? []);
    if (req.config.type === 'cluster') {
      return err(clusterNeedsApi(req.network, req.config.flavour));
    }
    const config = req.config;
    const sets = compileRanges(config);
    if (!sets.ok) return sets;
    const requested = matchRequested(req.network, sets.value, req.requestedIps ?? []);
    if (!requested.ok) return requested;
    return this.locks
      .run(req.network, () => this.allocateHostLocal(req, config, sets.value, requested.value))
      .catch((thrown: unknown) => err(toCniError(thrown, CniCode.IoFailure, `IPAM for network ${req.network}`)));
  }

  private async allocateHostLocal(
    req: IpamRequest,
    config: HostLocal,
    sets: readonly (readonly CompiledRange[])[],
    requested: ReadonlyMap<number, Ip>,
  ): Promise<Result<IpamResult>> {
    const held = this.store.owned(req.network, req.containerId, req.ifname);
    const reserved: StoredLease[] = [];
    const ips: ResultIp[] = [];
    const fail = async (error: CniError): Promise<Result<never>> => {
      const undone = await this.store.remove(req.network, reserved);
      const details = undone.failures.map((failure) => `rollback: ${failure.message}`).join('; ');
      return err(details === '' ? error : new CniError(error.code, error.message, details));
    };
    try {
      for (const [index, set] of sets.entries()) {
        // An ADD retried for the same owner gets the lease it already holds in this range set.
        const existing = held.find((stored) => set.some((range) => inRange(range, stored.ip)));
        if (existing !== undefined) {
          ips.push(resultIpOf(existing.lease));
          continue;
        }
        const wanted = requested.get(index);
        const outcome =
          wanted !== undefined
            ? await this.reserveRequested(req, set, wanted)
            : await this.reserveNext(req, index, set);
        if (!outcome.ok) return await fail(outcome.error);
        reserved.push(outcome.value);
        ips.push(resultIpOf(outcome.value.lease));
        this.store.setHint(req.network, index, outcome.value.ip);
      }
    } catch (thrown) {
      return await fail(toCniError(thrown, CniCode.IoFailure, `IPAM for network ${req.network}`));
    }
    return ok({ ips, routes: config.routes, ...withDns(config) });
  }

  private leaseFor(req: IpamRequest, range: CompiledRange, ip: Ip): Lease {
    return {
      network: req.network,
      address: formatCidr(ip.family, ip.value, range.subnet.prefix),
      gateway: formatIp(range.subnet.family, range.gateway),
      containerId: req.containerId,
      ifname: req.ifname,
      ...(req.owner !== undefined ? { owner: req.owner } : {}),
    };
  }

  private async reserveRequested(
    req: IpamRequest,
    set: readonly CompiledRange[],
    ip: Ip,
  ): Promise<Result<StoredLease>> {
    const range = set.find((candidate) => inRange(candidate, ip));
    const text = formatIp(ip.family, ip.value);
    if (range === undefined) return err(invalid(`requested IP ${text} is not in any range of network ${req.network}`));
    if (!isAllocatable(range, ip.value)) {
      return err(
        invalid(
          `requested IP ${text} is the gateway, network or broadcast address of ${describeRange(range)} in network ${req.network}`,
        ),
      );
    }
    const inUse = (holder: StoredLease): Result<never> =>
      err(
        new CniError(
          IPAM_ADDRESS_IN_USE,
          `requested IP ${text} is already allocated to ${describeHolder(holder.lease)} in network ${req.network}`,
        ),
      );
    const holder = this.store.holder(req.network, ip);
    if (holder !== undefined) return inUse(holder);
    const lease = this.leaseFor(req, range, ip);
    const taken = await this.store.reserve(ip, lease);
    return taken === undefined ? ok({ ip, lease }) : inUse(taken);
  }

  /** The next free address of the set, starting after the last one reserved there (host-local's last_reserved_ip). */
  private async reserveNext(
    req: IpamRequest,
    index: number,
    set: readonly CompiledRange[],
  ): Promise<Result<StoredLease>> {
    let rangeIndex = 0;
    let value = set[0]?.start ?? 0n;
    const hint = this.store.hint(req.network, index);
    const hinted = hint === undefined ? -1 : set.findIndex((range) => inRange(range, hint));
    if (hint !== undefined && hinted >= 0) {
      rangeIndex = hinted;
      value = hint.value + 1n;
    }
    let remaining = set.reduce((sum, range) => sum + (range.end - range.start + 1n), 0n);
    for (; remaining > 0n; remaining--) {
      let range = set[rangeIndex];
      if (range === undefined) break;
      if (value > range.end) {
        rangeIndex = (rangeIndex + 1) % set.length;
        range = set[rangeIndex];
        if (range === undefined) break;
        value = range.start;
      }
      const ip: Ip = { family: range.subnet.family, value };
      value++;
      if (!isAllocatable(range, ip.value) || this.store.holder(req.network, ip) !== undefined) continue;
      const lease = this.leaseFor(req, range, ip);
      // Another process may have taken it since open(): the store then learns its holder and we move on.
      if ((await this.store.reserve(ip, lease)) === undefined) return ok({ ip, lease });
    }
    return err(
      new CniError(
        IPAM_POOL_EXHAUSTED,
        `no free address in network ${req.network}: range set ${index} (${set.map(describeRange).join(', ')}) is exhausted`,
      ),
    );
  }

  /** Releases every lease of the owner in the network. Idempotent: releasing nothing is ok([]). */
  async release(network: string, containerId: string, ifname: string): Promise<Result<readonly Lease[]>> {
    const bad = checkNetwork(network);
    if (bad !== undefined) return err(bad);
    return this.locks
      .run(network, async (): Promise<Result<readonly Lease[]>> => {
        const outcome = await this.store.remove(network, this.store.owned(network, containerId, ifname));
        if (outcome.failures.length > 0) {
          return err(
            new CniError(
              CniCode.IoFailure,
              `could not release ${outcome.failures.length} lease(s) of container ${containerId} interface ${ifname} in network ${network}`,
              outcome.failures.map((failure) => failure.message).join('; '),
            ),
          );
        }
        return ok(outcome.removed);
      })
      .catch((thrown: unknown) => err(toCniError(thrown, CniCode.IoFailure, `IPAM for network ${network}`)));
  }

  /** Every lease, or those of one network, ordered by network then address. */
  leases(network?: string): Promise<readonly Lease[]> {
    return Promise.resolve(sortLeases(this.store.all(network)));
  }

  /**
   * Releases every lease for which keep(lease) is false; returns what it released. For GC and crash
   * recovery. A lease whose file cannot be removed stays in leases() and is retried on the next call.
   */
  async releaseUnless(keep: (lease: Lease) => boolean): Promise<readonly Lease[]> {
    const released: Lease[] = [];
    for (const network of this.store.networkNames()) {
      const outcome = await this.locks.run(network, () =>
        this.store.remove(
          network,
          this.store.all(network).filter((stored) => !keep(stored.lease)),
        ),
      );
      released.push(...outcome.removed);
    }
    return released;
  }
}

function sortLeases(stored: readonly StoredLease[]): readonly Lease[] {
  return [...stored]
    .sort((a, b) =>
      a.lease.network !== b.lease.network
        ? a.lease.network < b.lease.network
          ? -1
          : 1
        : a.ip.family !== b.ip.family
          ? a.ip.family - b.ip.family
          : a.ip.value < b.ip.value
            ? -1
            : a.ip.value > b.ip.value
              ? 1
              : 0,
    )
    .map((entry) => entry.lease);
}

/** Assigns each requested IP to the one range set containing it. */
function matchRequested(
  network: string,
  sets: readonly (readonly CompiledRange[])[],
  requestedIps: readonly string[],
): Result<ReadonlyMap<number, Ip>> {
  const byset = new Map<number, Ip>();
  for (const text of requestedIps) {
    const cidr = text.includes('/') ? parseCidr(text) : undefined;
    const ip = cidr ?? parseIp(text);
    if (ip === undefined) return err(invalid(`requested IP ${JSON.stringify(text)} is not a valid IP address`));
    const index = sets.findIndex((set) => set.some((range) => inRange(range, ip)));
    const set = sets[index];
    if (set === undefined)
      return err(invalid(`requested IP ${formatIp(ip.family, ip.value)} is not in any range of network ${network}`));
    const range = set.find((candidate) => inRange(candidate, ip));
    if (cidr !== undefined && range !== undefined && cidr.prefix !== range.subnet.prefix) {
      return err(
        invalid(
          `requested IP ${text} has prefix /${cidr.prefix} but its range ${describeRange(range)} in network ${network} is a /${range.subnet.prefix}`,
        ),
      );
    }
    const other = byset.get(index);
    if (other !== undefined) {
      return err(
        invalid(
          `requested IPs ${formatIp(other.family, other.value)} and ${formatIp(ip.family, ip.value)} are both in range set ${index} of network ${network}: one address is allocated per range set`,
        ),
      );
    }
    byset.set(index, { family: ip.family, value: ip.value });
  }
  return ok(byset);
}

/** As the static plugin: the configured addresses plus requested ones (which need a prefix); nothing is stored. */
function allocateStatic(config: Static, requestedIps: readonly string[]): Result<IpamResult> {
  const ips: ResultIp[] = [...config.addresses];
  for (const text of requestedIps) {
    const cidr = parseCidr(text);
    if (cidr === undefined) {
      return err(
        invalid(
          `requested IP ${JSON.stringify(text)} must be an address with a prefix length (e.g. 10.10.0.1/24) for static IPAM`,
        ),
      );
    }
    const address = formatCidr(cidr.family, cidr.value, cidr.prefix);
    if (!ips.some((ip) => ip.address === address)) ips.push({ address });
  }
  if (ips.length === 0)
    return err(invalid('ipam.addresses: static IPAM needs at least one address (in ipam.addresses or requested)'));
  return ok({ ips, routes: config.routes, ...withDns(config) });
}
