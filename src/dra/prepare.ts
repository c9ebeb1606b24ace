/**
 * NodePrepareResources and NodeUnprepareResources, without gRPC: each claim is read from the API, its plexus.io
 * results matched to this node's devices, its opaque config validated, and the prepared claim recorded before the
 * answer. A claim that cannot be prepared gets an error naming why; the others are prepared. Calls are serialized, so
 * two claims never race for one device.
 */
import type { Logger } from 'pino';
import { isolationProblem, type IsolationSettings } from '../networks/isolation';
import type { NetworkReader } from '../networks/source';
import { DRIVER_NAME, type ClaimRef, type NodePrepareResourceResponse, type PreparedDevice } from './api';
import { configForRequest } from './claim-config';
import type { ClaimReader, ResourceClaim } from './claims-api';
import type { DraInventory } from './devices';
import type { PreparedClaim, PreparedClaims } from './prepared-claims';
import { makeMemifSocket, memifSocketProblem, removeMemifSocket } from './memif-sockets';
import { recordProblems } from './record-checks';
import { staleClaims, type StaleClaimsEnv } from './stale-claims';
import { cdiDeviceIds, type CdiSpecs } from './cdi-specs';
import { memifDeviceInfo } from '../deviceplugin/memif-devices';
import { removeDeviceInfo, writeDeviceInfo } from '../deviceplugin/device-info';
import { errorMessage } from '../common/error-message';

export interface PrepareEnv {
  readonly claims: ClaimReader;
  readonly inventory: DraInventory;
  readonly prepared: PreparedClaims;
  /** Whether the device plugin has a device in a pod now (a resource offered both ways); absent: never. */
  readonly inUseByDevicePlugin?: (resourceName: string, deviceID: string) => Promise<boolean>;
  /** Called after a claim was prepared or freed (the slices show held devices). */
  readonly changed?: () => void;
  /**
   * The NADs a claim's config may name, read from the API when the cache has not seen one: a refused Prepare costs the
   * pod a kubelet resync (60-90 s, kubernetes/kubernetes#139836), so a NAD made a moment ago must not be refused.
   * Absent: not checked, as in tests of the wire.
   */
  readonly networks?: NetworkReader;
  /** The engine's namespace isolation: a claim may name only a NAD its pod could select. */
  readonly isolation?: IsolationSettings;
  /** Where each prepared claim's CDI spec goes (cdi-specs.ts); absent: none written, no CDI device IDs answered. */
  readonly cdi?: CdiSpecs;
  /** Where a memif device's NPWG device-info file goes, as the device plugin's Allocate writes it; absent: none. */
  readonly deviceInfoDir?: string;
  readonly log: Logger;
}

const failure = (error: string): NodePrepareResourceResponse => ({ devices: [], error });

/** Why a claim cannot be prepared: these say what to fix. */
const claimErrors = {
  missing: (c: ClaimRef) => `ResourceClaim ${c.namespace}/${c.name} does not exist (deleted before the pod started?)`,
  otherUid: (c: ClaimRef, uid: string) =>
    `ResourceClaim ${c.namespace}/${c.name} has UID ${uid}, not ${c.uid}: it was deleted and made again`,
  notAllocated: (c: ClaimRef) => `ResourceClaim ${c.namespace}/${c.name} is not allocated`,
  unknownDevice: (pool: string, device: string) =>
    `device ${device} of pool ${pool} is not offered by this node's plexusd (was the resources file changed?)`,
  taken: (pool: string, device: string, other: PreparedClaim) =>
    `device ${device} of pool ${pool} is already prepared for ResourceClaim ${other.namespace}/${other.name} (${other.uid})`,
  devicePlugin: (device: string, resource: string) =>
    `device ${device} of ${resource} is in a pod through the device plugin: offer it one way only`,
  noNetwork: (request: string, why: string) => `the network named by the opaque config of request ${request}: ${why}`,
  isolated: (request: string, why: string) => `the opaque config of request ${request}: ${why}`,
  recordUnfit: (c: ClaimRef, problems: readonly string[]) =>
    `the prepared record of ResourceClaim ${c.namespace}/${c.name} names what this node does not offer (${problems.join('; ')}): unprepare the claim (delete its pod) or fix the resources file`,
};

export class ClaimPreparer {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly env: PrepareEnv) {}

  prepare(claims: readonly ClaimRef[]): Promise<Record<string, NodePrepareResourceResponse>> {
    return this.serialized(async () => {
      const out: Record<string, NodePrepareResourceResponse> = {};
      for (const ref of claims) out[ref.uid] = await this.prepareOne(ref);
      this.env.changed?.();
      return out;
    });
  }

  unprepare(claims: readonly ClaimRef[]): Promise<Record<string, { error: string }>> {
    return this.serialized(() => {
      const out: Record<string, { error: string }> = {};
      for (const ref of claims) {
        try {
          const was = this.free(ref.uid);
          this.env.log.info({ claim: `${ref.namespace}/${ref.name}`, uid: ref.uid, was }, 'claim unprepared');
          out[ref.uid] = { error: '' };
        } catch (e) {
          out[ref.uid] = {
            error: `removing the prepared record of ${ref.namespace}/${ref.name}: ${errorMessage(e)}`,
          };
        }
      }
      this.env.changed?.();
      return Promise.resolve(out);
    });
  }

  /** Releases the records nobody will unprepare (stale-claims.ts), between Prepare calls; answers their claims. */
  releaseStale(env: StaleClaimsEnv): Promise<string[]> {
    return this.serialized(async () => {
      const stale = await staleClaims(env, this.env.prepared);
      for (const { record, why } of stale) {
        this.free(record.uid);
        const devices = record.devices.map((d) => `${d.pool}/${d.device}`);
        this.env.log.warn(
          { claim: `${record.namespace}/${record.name}`, uid: record.uid, devices, why },
          'stale prepared claim released',
        );
      }
      if (stale.length) this.env.changed?.();
      return stale.map(({ record }) => `${record.namespace}/${record.name}`);
    });
  }

  /**
   * Frees a claim: its memif sockets and device-info files, its CDI spec, then its record (a crash between leaves a
   * spec with no record, which the next start removes). Answers whether it was prepared; throws what the disk says.
   */
  private free(uid: string): boolean {
    this.freeMemifSockets(uid);
    this.env.cdi?.remove(uid);
    return this.env.prepared.remove(uid);
  }

  /** Writes what a prepared claim's devices need outside the record: device-info files, the CDI spec. */
  private writeDeviceFiles(claim: PreparedClaim): void {
    const dir = this.env.deviceInfoDir;
    for (const d of claim.devices) {
      const config = d.socket ? this.env.inventory.memifResource(d.resourceName) : undefined;
      if (dir && config) writeDeviceInfo(dir, d.resourceName, d.deviceID, memifDeviceInfo(config, d.deviceID));
    }
    this.env.cdi?.write(claim);
  }

  private answer(claim: PreparedClaim): NodePrepareResourceResponse {
    const cdi = this.env.cdi !== undefined;
    return { devices: claim.devices.map((d) => toPreparedDevice(d, cdi ? cdiDeviceIds(claim.uid, d) : [])), error: '' };
  }

  /** The record with a socket made for each memif device (as the device plugin's Allocate makes one). */
  private withMemifSockets(claim: PreparedClaim): PreparedClaim {
    const devices = claim.devices.map((d) => {
      const dir = d.kind === 'memif' ? this.env.inventory.memifDir(d.resourceName, d.deviceID) : undefined;
      return dir ? { ...d, ...makeMemifSocket(dir) } : d;
    });
    return { ...claim, devices };
  }

  /** Removes the socket directories of a claim's memif devices: only where Prepare makes them, else says why not. */
  private freeMemifSockets(uid: string): void {
    const record = this.env.prepared.get(uid);
    if (!record) return;
    for (const d of record.devices) {
      if (!d.socket) continue;
      const dir = this.env.inventory.memifDir(d.resourceName, d.deviceID);
      const why = dir ? memifSocketProblem(d.socket, dir) : `resource ${d.resourceName} has no memif socketDir now`;
      if (!why) {
        removeMemifSocket(d.socket);
        if (this.env.deviceInfoDir) removeDeviceInfo(this.env.deviceInfoDir, d.resourceName, d.deviceID);
      } else
        this.env.log.warn(
          { claim: `${record.namespace}/${record.name}`, uid, socket: d.socket, why },
          "a prepared claim's memif socket directory is not removed",
        );
    }
  }

  private serialized<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(work, work);
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async prepareOne(ref: ClaimRef): Promise<NodePrepareResourceResponse> {
    const log = this.env.log.child({ claim: `${ref.namespace}/${ref.name}`, uid: ref.uid });
    const done = this.env.prepared.get(ref.uid);
    const unfit = done ? recordProblems(this.env.inventory, done) : [];
    if (unfit.length) return failure(claimErrors.recordUnfit(ref, unfit));
    if (done) {
      // The kubelet asks again: the same answer, its spec written again (removed by hand, or a crash before the record).
      try {
        this.env.cdi?.write(done);
      } catch (e) {
        return failure(`writing the CDI spec of the prepared claim under ${this.env.cdi?.dir}: ${errorMessage(e)}`);
      }
      return this.answer(done);
    }
    const read = await this.env.claims.get(ref.namespace, ref.name);
    if (!read.ok) return failure(read.error);
    const claim = read.value;
    if (!claim) return failure(claimErrors.missing(ref));
    if (claim.metadata.uid !== ref.uid) return failure(claimErrors.otherUid(ref, claim.metadata.uid));
    const built = await this.build(ref, claim);
    if (typeof built === 'string') {
      log.warn({ err: built }, 'claim not prepared');
      return failure(built);
    }
    const prepared = this.withMemifSockets(built);
    try {
      this.writeDeviceFiles(prepared);
    } catch (e) {
      this.env.cdi?.remove(prepared.uid);
      return failure(`writing the claim's CDI spec or device-info files: ${errorMessage(e)}`);
    }
    try {
      this.env.prepared.record(prepared);
    } catch (e) {
      this.env.cdi?.remove(prepared.uid);
      return failure(`recording the prepared claim under plexusd's state dir: ${errorMessage(e)}`);
    }
    log.info({ devices: built.devices.map((d) => `${d.pool}/${d.device}`) }, 'claim prepared');
    return this.answer(prepared);
  }

  /** The record to keep for a claim, or why it cannot be prepared. */
  private async build(ref: ClaimRef, claim: ResourceClaim): Promise<PreparedClaim | string> {
    const allocation = claim.status?.allocation?.devices;
    if (!allocation) return claimErrors.notAllocated(ref);
    const results = (allocation.results ?? []).filter((r) => r.driver === DRIVER_NAME);
    const devices: PreparedClaim['devices'] = [];
    for (const r of results) {
      const device = this.env.inventory.find(r.pool, r.device);
      if (!device) return claimErrors.unknownDevice(r.pool, r.device);
      const other = this.env.prepared.holder(r.pool, r.device, ref.uid);
      if (other) return claimErrors.taken(r.pool, r.device, other);
      if (await this.env.inUseByDevicePlugin?.(device.resourceName, device.deviceID).catch(() => false)) {
        return claimErrors.devicePlugin(device.deviceID, device.resourceName);
      }
      const config = configForRequest(allocation.config ?? [], r.request, ref.namespace);
      if (!config.ok) return config.error;
      const unusable = config.value && (await this.networkProblem(ref.namespace, r.request, config.value.network));
      if (unusable) return unusable;
      const { ips, ...rest } = config.value ?? {};
      devices.push({
        request: r.request,
        pool: r.pool,
        device: r.device,
        resourceName: device.resourceName,
        kind: device.kind,
        deviceID: device.deviceID,
        ...rest,
        ...(ips ? { ips: [...ips] } : {}),
      });
    }
    const pods = (claim.status?.reservedFor ?? [])
      .filter((p) => (p.resource ?? 'pods') === 'pods')
      .map((p) => ({ name: p.name, uid: p.uid }));
    return {
      v: 1,
      uid: ref.uid,
      namespace: ref.namespace,
      name: ref.name,
      pods,
      devices,
      preparedAt: new Date().toISOString(),
    };
  }

  /**
   * Why the pods of a claim in `namespace` may not have the network its config names: the NAD does not exist, or
   * namespace isolation keeps it from them (the rule the engine applies to the networks annotation).
   */
  private async networkProblem(
    namespace: string,
    request: string,
    network: { namespace: string; name: string },
  ): Promise<string | undefined> {
    const refused = isolationProblem(
      this.env.isolation ?? {},
      namespace,
      network,
      `ResourceClaim of namespace ${namespace}`,
    );
    if (refused)
      return claimErrors.isolated(
        request,
        refused.details ? `${refused.message}; ${refused.details}` : refused.message,
      );
    const found = await this.env.networks?.read(network.namespace, network.name);
    if (found && !found.ok) return claimErrors.noNetwork(request, found.error.message);
    return undefined;
  }
}

const toPreparedDevice = (d: PreparedClaim['devices'][number], cdiDeviceIds: string[]): PreparedDevice => ({
  request_names: [d.request],
  pool_name: d.pool,
  device_name: d.device,
  cdi_device_ids: cdiDeviceIds,
});
