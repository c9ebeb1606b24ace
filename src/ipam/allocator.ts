/**
 * Address allocation with host-local's semantics on top of the embedded lease store:
 * one address per range set, round-robin after the last reserved address, never the
 * gateway, network or broadcast address; idempotent for the same owner; all or nothing.
 * On the node's own store, each host-local network's addresses are shared with the reference plugin's directory
 * (host-local-dir.ts): what it holds is skipped, and each lease is written there too.
 */
import type { IpamBackend, IpamRequest, IpamResult } from './backend';
import { CniCode, CniError, type Result, err, ok, toCniError } from '../cni/errors';
import { IPAM_ADDRESS_IN_USE, IPAM_POOL_EXHAUSTED } from './codes';
import type { IpamConfig } from './config';
import { type CompiledRange, compileRanges, describeRange, isAllocatable } from './ranges';
import { type Ip, formatCidr, formatIp } from '../common/ip';
import { KeyedMutex } from '../common/keyed-mutex';
import { claimNeedsClusterPool, clusterNeedsApi } from './errors';
import { type Share, HostLocalSharing, type SharingOptions } from './host-local-sharing';
import { type Lease, type StoredLease, isSafeNetworkName } from './lease';
import { inRange, invalid, matchRequested } from './requested-ips';
import { allocateStatic, withDns } from './static-ipam';
import { LeaseStore, type LeaseStoreOptions } from './store';
import { definedFields } from '../common/defined-fields';

export type IpamOptions = LeaseStoreOptions & SharingOptions;

type HostLocal = Extract<IpamConfig, { type: 'host-local' }>;
type ResultIp = IpamResult['ips'][number];
type Removal = { readonly removed: readonly Lease[]; readonly failures: readonly Error[] };

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

function describeHolder(lease: Lease): string {
  return lease.containerId === ''
    ? 'a lease file with no valid owner'
    : `container ${lease.containerId} interface ${lease.ifname}`;
}

const inUse = (text: string, holder: string, network: string): Result<never> =>
  err(
    new CniError(IPAM_ADDRESS_IN_USE, `requested IP ${text} is already allocated to ${holder} in network ${network}`),
  );

const resultIpOf = (lease: Lease): ResultIp =>
  lease.gateway !== undefined ? { address: lease.address, gateway: lease.gateway } : { address: lease.address };

export class Ipam implements IpamBackend {
  private readonly locks = new KeyedMutex();
  private readonly sharing: HostLocalSharing;

  private constructor(
    private readonly store: LeaseStore,
    options: SharingOptions,
  ) {
    this.sharing = new HostLocalSharing(store, options);
  }

  /** Opens the store in `dir` (<state-dir>/ipam), creating it with mode 0700 if missing. */
  static async open(dir: string, options: IpamOptions = {}): Promise<Ipam> {
    return new Ipam(await LeaseStore.open(dir, options), options);
  }

  /** Removes leases, each one's copy in host-local's directory first (a crash between leaves the lease held). */
  private async removeLeases(network: string, stored: readonly StoredLease[]): Promise<Removal> {
    const copies = this.sharing.removeCopies(network, stored);
    const outcome = await this.store.remove(network, copies.kept);
    return { removed: outcome.removed, failures: [...copies.failures, ...outcome.failures] };
  }

  /**
   * Writes the leases of each host-local network into its host-local directory now, rather than at the network's
   * first allocation (at start, so a delegated host-local never meets them missing); the problems, per network.
   */
  async shareHeld(networks: readonly { readonly network: string; readonly config: IpamConfig }[]): Promise<string[]> {
    const problems: string[] = [];
    for (const { network, config } of networks) {
      const path = config.type === 'host-local' ? this.sharing.dirOf(network, config) : undefined;
      if (path === undefined || this.store.all(network).length === 0) continue;
      await this.locks
        .run(network, () => this.sharing.run(network, path, () => Promise.resolve()))
        .catch((thrown: unknown) => problems.push(`network ${network}: ${String(thrown)}`));
    }
    return problems;
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
    const path = this.sharing.dirOf(req.network, config);
    return this.locks
      .run(req.network, () =>
        this.sharing.run(req.network, path, (share) =>
          this.allocateHostLocal({ req, config, sets: sets.value, requested: requested.value, share }),
        ),
      )
      .catch((thrown: unknown) => err(toCniError(thrown, CniCode.IoFailure, `IPAM for network ${req.network}`)));
  }

  private async allocateHostLocal(a: {
    readonly req: IpamRequest;
    readonly config: HostLocal;
    readonly sets: readonly (readonly CompiledRange[])[];
    readonly requested: ReadonlyMap<number, Ip>;
    readonly share: Share;
  }): Promise<Result<IpamResult>> {
    const { req, config, sets, requested, share } = a;
    const held = this.store.owned(req.network, req.containerId, req.ifname);
    const reserved: StoredLease[] = [];
    const ips: ResultIp[] = [];
    const fail = async (error: CniError): Promise<Result<never>> => {
      const undone = await this.removeLeases(req.network, reserved);
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
            ? await this.reserveRequested(req, set, wanted, share)
            : await this.reserveNext(req, { index, set }, share);
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

  private leaseFor(req: IpamRequest, range: CompiledRange, ip: Ip, share: Share): Lease {
    return {
      network: req.network,
      address: formatCidr(ip.family, ip.value, range.subnet.prefix),
      gateway: formatIp(range.subnet.family, range.gateway),
      containerId: req.containerId,
      ifname: req.ifname,
      ...definedFields({ owner: req.owner, hostLocalDir: share.path }),
    };
  }

  /**
   * Leases the address in this store and then in host-local's directory; undefined when either has it already (the
   * directory's file made without its lock): this store's lease is then taken back.
   */
  private async reserveShared(ip: Ip, lease: Lease, share: Share): Promise<StoredLease | 'taken' | undefined> {
    const taken = await this.store.reserve(ip, lease);
    if (taken !== undefined) return 'taken';
    if (share.write(ip, lease)) return { ip, lease };
    const undone = await this.store.remove(lease.network, [{ ip, lease }]);
    if (undone.failures[0] !== undefined) throw undone.failures[0];
    return undefined;
  }

  private async reserveRequested(
    req: IpamRequest,
    set: readonly CompiledRange[],
    ip: Ip,
    share: Share,
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
    const holder = this.store.holder(req.network, ip);
    if (holder !== undefined) return inUse(text, describeHolder(holder.lease), req.network);
    const shared = (): string => `${share.holderOf(ip)} in host-local's store ${share.path ?? ''}`;
    if (share.holds(ip)) return inUse(text, shared(), req.network);
    const lease = this.leaseFor(req, range, ip, share);
    const reserved = await this.reserveShared(ip, lease, share);
    if (reserved === 'taken') {
      const taken = this.store.holder(req.network, ip);
      return inUse(text, taken !== undefined ? describeHolder(taken.lease) : 'another process', req.network);
    }
    return reserved !== undefined ? ok(reserved) : inUse(text, shared(), req.network);
  }

  /** The next free address of the set, starting after the last one reserved there (host-local's last_reserved_ip). */
  private async reserveNext(
    req: IpamRequest,
    { index, set }: { readonly index: number; readonly set: readonly CompiledRange[] },
    share: Share,
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
      if (!isAllocatable(range, ip.value) || this.store.holder(req.network, ip) !== undefined || share.holds(ip))
        continue;
      // Another process may have taken it since open(): the store then learns its holder and we move on.
      const reserved = await this.reserveShared(ip, this.leaseFor(req, range, ip, share), share);
      if (reserved !== undefined && reserved !== 'taken') return ok(reserved);
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
        const outcome = await this.removeLeases(network, this.store.owned(network, containerId, ifname));
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
        this.removeLeases(
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
