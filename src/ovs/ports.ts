/**
 * Ports of a userspace (DPDK) Open vSwitch bridge, as Plexus makes them for pods: added and removed in one OVSDB
 * transaction each, then waited for until ovs-vswitchd has applied it (next_cfg/cur_cfg, as ovs-vsctl waits), so an
 * ADD answers only once the port's socket listens, and a port the switch could not open is an error, not a silent
 * half-made port. Every port carries external_ids that say it is Plexus's and whose it is.
 */
import { err, ok, type Result } from '../cni/errors';
import { dpdkCeilingHint, ovsErrors } from './errors';
import { fromOvsMap, namedUuid, ovsMap, ovsSet, type OvsdbClient, type OvsdbOperation } from './ovsdb';
import { definedFields } from '../common/defined-fields';

/** external_ids key that marks a port as Plexus's (value: the node's name, or "plexus"). */
export const OWNER_KEY = 'plexus-owner';

export interface DpdkPortSpec {
  readonly bridge: string;
  readonly port: string;
  /** DPDK device arguments, e.g. net_memifX,role=server,socket=...,socket-abstract=no,secret=... */
  readonly devargs: string;
  /** The port's receive queues (the client's transmit queues may not exceed them). */
  readonly rxQueues: number;
  readonly externalIds: Readonly<Record<string, string>>;
}

export interface PortState {
  readonly name: string;
  /** ovs-vswitchd's complaint about the interface, when it could not open it. */
  readonly error?: string;
  readonly ofport?: number;
  readonly externalIds: Readonly<Record<string, string>>;
}

const POLL_MS = 5;
/** DPDK's ports per process in Debian's build (RTE_MAX_ETHPORTS); a different build may allow more. */
export const DPDK_MAX_PORTS_HINT = 32;

export class SwitchPorts {
  constructor(
    private readonly db: OvsdbClient,
    private readonly applyTimeoutMs = 15_000,
  ) {}

  /** Adds the port (replacing one of the same name left behind), and answers once the switch has opened it. */
  async add(spec: DpdkPortSpec): Promise<Result<PortState>> {
    let made = await this.insert(spec);
    if (!made.ok && /constraint violation/.test(made.error.message)) {
      const removed = await this.remove(spec.bridge, spec.port);
      if (!removed.ok) return removed;
      made = await this.insert(spec);
    }
    if (!made.ok) return made;
    const applied = await this.waitApplied(made.value);
    if (!applied.ok) return applied;
    const state = await this.state(spec.port);
    if (!state.ok) return state;
    if (!state.value || state.value.error || state.value.ofport === undefined || state.value.ofport < 0) {
      let why = state.value?.error ?? 'the switch did not give it an OpenFlow port';
      await this.remove(spec.bridge, spec.port);
      const dpdkPorts = await this.countDpdkPorts();
      // DPDK has a build-time ceiling of ports per process (RTE_MAX_ETHPORTS: 32 in Debian's 22.11), and a port past it
      // fails with nothing more than this generic error.
      if (dpdkPorts.ok && dpdkPorts.value >= DPDK_MAX_PORTS_HINT) {
        why += dpdkCeilingHint(dpdkPorts.value, DPDK_MAX_PORTS_HINT);
      }
      return err(ovsErrors.portNotOpened(spec.port, spec.bridge, why, redactSecret(spec.devargs)));
    }
    return ok(state.value);
  }

  /** Removes the port if it is there (on any bridge); removing what is gone succeeds. */
  async remove(bridge: string, port: string): Promise<Result<void>> {
    const found = await this.db.transact([
      { op: 'select', table: 'Port', where: [['name', '==', port]], columns: ['_uuid'] },
    ]);
    if (!found.ok) return found;
    const uuid = found.value[0]?.rows?.[0]?.['_uuid'];
    if (!uuid) return ok(undefined);
    // Ports and Interfaces are not root rows: dropping the Port from its Bridge deletes both.
    const removed = await this.db.transact([
      { op: 'mutate', table: 'Bridge', where: [], mutations: [['ports', 'delete', ovsSet([uuid])]] },
      ...bumpConfig(),
    ]);
    if (!removed.ok) return err(removed.error.withContext(`removing port ${port} from ${bridge}`));
    const applied = await this.waitApplied(removed.value);
    return applied.ok ? ok(undefined) : applied;
  }

  /** One port's state, or undefined when the switch has no port of that name. */
  async state(port: string): Promise<Result<PortState | undefined>> {
    const r = await this.db.transact([
      {
        op: 'select',
        table: 'Interface',
        where: [['name', '==', port]],
        columns: ['name', 'error', 'ofport', 'external_ids'],
      },
    ]);
    if (!r.ok) return r;
    const row = r.value[0]?.rows?.[0];
    return ok(row ? toPortState(row) : undefined);
  }

  /** Every interface Plexus made on this switch (external_ids has plexus-owner). */
  async listOwned(): Promise<Result<PortState[]>> {
    const r = await this.db.transact([
      { op: 'select', table: 'Interface', where: [], columns: ['name', 'error', 'ofport', 'external_ids'] },
    ]);
    if (!r.ok) return r;
    return ok((r.value[0]?.rows ?? []).map(toPortState).filter((p) => p.externalIds[OWNER_KEY] !== undefined));
  }

  /** How many DPDK-type interfaces the switch has (each takes one of DPDK's ports). */
  async countDpdkPorts(): Promise<Result<number>> {
    const r = await this.db.transact([
      { op: 'select', table: 'Interface', where: [['type', '==', 'dpdk']], columns: ['name'] },
    ]);
    return r.ok ? ok(r.value[0]?.rows?.length ?? 0) : r;
  }

  /** Whether ovs-vswitchd has initialised DPDK (false when it never did, or the database does not answer). */
  async dpdkReady(): Promise<boolean> {
    const r = await this.db.transact([
      { op: 'select', table: 'Open_vSwitch', where: [], columns: ['dpdk_initialized'] },
    ]);
    return r.ok && r.value[0]?.rows?.[0]?.['dpdk_initialized'] === true;
  }

  /** Whether the bridge exists (a port's bridge is the operator's, never made by Plexus). */
  async hasBridge(bridge: string): Promise<Result<boolean>> {
    const r = await this.db.transact([
      { op: 'select', table: 'Bridge', where: [['name', '==', bridge]], columns: ['name'] },
    ]);
    return r.ok ? ok((r.value[0]?.rows?.length ?? 0) > 0) : r;
  }

  private async insert(
    spec: DpdkPortSpec,
  ): Promise<Result<readonly { rows?: readonly Readonly<Record<string, unknown>>[] }[]>> {
    const ids = ovsMap(spec.externalIds);
    const r = await this.db.transact([
      // Fails the transaction (nothing is made) when the bridge is not there.
      {
        op: 'wait',
        table: 'Bridge',
        where: [['name', '==', spec.bridge]],
        columns: ['name'],
        until: '==',
        rows: [{ name: spec.bridge }],
        timeout: 0,
      },
      {
        op: 'insert',
        table: 'Interface',
        'uuid-name': 'iface',
        row: {
          name: spec.port,
          type: 'dpdk',
          options: ovsMap({ 'dpdk-devargs': spec.devargs, n_rxq: String(spec.rxQueues) }),
          external_ids: ids,
        },
      },
      {
        op: 'insert',
        table: 'Port',
        'uuid-name': 'port',
        row: { name: spec.port, interfaces: namedUuid('iface'), external_ids: ids },
      },
      {
        op: 'mutate',
        table: 'Bridge',
        where: [['name', '==', spec.bridge]],
        mutations: [['ports', 'insert', ovsSet([namedUuid('port')])]],
      },
      ...bumpConfig(),
    ]);
    if (!r.ok && /timed out/.test(r.error.message)) return err(ovsErrors.noBridge(spec.bridge));
    return r;
  }

  /** Waits until ovs-vswitchd has applied the configuration a transaction asked for (its select of next_cfg is last). */
  private async waitApplied(
    results: readonly { rows?: readonly Readonly<Record<string, unknown>>[] }[],
  ): Promise<Result<void>> {
    const target = Number(results[results.length - 1]?.rows?.[0]?.['next_cfg']);
    if (!Number.isFinite(target)) return ok(undefined);
    const deadline = Date.now() + this.applyTimeoutMs;
    for (;;) {
      const r = await this.db.transact([{ op: 'select', table: 'Open_vSwitch', where: [], columns: ['cur_cfg'] }]);
      if (!r.ok) return r;
      const cur = Number(r.value[0]?.rows?.[0]?.['cur_cfg']);
      // cur_cfg also moves past the target when others change the switch meanwhile.
      if (cur >= target) return ok(undefined);
      if (Date.now() > deadline) return err(ovsErrors.notApplied(this.applyTimeoutMs, cur, target));
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }
}

/** Increments next_cfg (ovs-vswitchd copies it to cur_cfg once it applied everything) and reads the new value. */
const bumpConfig = (): OvsdbOperation[] => [
  { op: 'mutate', table: 'Open_vSwitch', where: [], mutations: [['next_cfg', '+=', 1]] },
  { op: 'select', table: 'Open_vSwitch', where: [], columns: ['next_cfg'] },
];

function toPortState(row: Readonly<Record<string, unknown>>): PortState {
  const error = typeof row['error'] === 'string' ? row['error'] : undefined;
  const ofport = typeof row['ofport'] === 'number' ? row['ofport'] : undefined;
  return {
    name: String(row['name']),
    ...definedFields({ error: error || undefined, ofport }),
    externalIds: fromOvsMap(row['external_ids']),
  };
}

/** devargs for logs and errors: the memif secret is not shown. */
export const redactSecret = (devargs: string): string => devargs.replace(/secret=[^,]*/, 'secret=***');
