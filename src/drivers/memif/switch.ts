/**
 * The memif driver's side of the node's userspace switches (OVS): one database connection per socket, and the port
 * operations of ADD, undo, CHECK, GC and STATUS on them. Removals are remembered for a while, so a resync that read
 * the journal before a port's DEL does not make that port again.
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { DEFAULT_OVSDB_SOCKET, OvsdbClient } from '../../ovs/ovsdb';
import { OWNER_KEY, redactSecret, SwitchPorts, type DpdkPortSpec, type PortState } from '../../ovs/ports';
import type { LiveAttachment } from '../driver';
import type { MemifConfig } from './config';

/** Removes a pod's port from a userspace switch. */
export interface SwitchPortStep {
  readonly ovsdb: string;
  readonly bridge: string;
  readonly port: string;
  readonly devargs: string;
  readonly rxQueues: number;
  readonly externalIds: Readonly<Record<string, string>>;
}

/** How long a port's removal is remembered, so a resync that listed the journal before it does not make it again. */
const REMOVALS_KEPT_MS = 10 * 60_000;
/** A port younger than this may belong to an ADD whose record is not committed yet: GC leaves it. */
const GC_SETTLE_MS = 60_000;

interface Switch {
  readonly db: OvsdbClient;
  readonly ports: SwitchPorts;
}

export class MemifSwitches {
  private readonly byPath = new Map<string, Switch>();
  /** When each port was last removed. */
  private readonly removedAt = new Map<string, number>();
  private readonly reconnectListeners: (() => void)[] = [];

  constructor(private readonly defaultOvsdb: string = DEFAULT_OVSDB_SOCKET) {}

  /** The database socket of a network's switch: its own, else the daemon's --ovsdb-socket. */
  ovsdbOf(conf: MemifConfig): string {
    return conf.ovsdbSocket ?? this.defaultOvsdb;
  }

  /** The ports of the switch at `ovsdb`, connected on first use. */
  portsAt(ovsdb: string): SwitchPorts {
    return this.switchAt(ovsdb).ports;
  }

  /** Calls `listener` whenever a connection to a switch database is made again (the switch may have lost its ports). */
  onReconnect(listener: () => void): void {
    this.reconnectListeners.push(listener);
  }

  add(ovsdb: string, spec: DpdkPortSpec): Promise<Result<PortState>> {
    return this.portsAt(ovsdb).add(spec);
  }

  /** Undo of a port: removes it (already gone is fine) and remembers when. */
  async remove(step: SwitchPortStep): Promise<Result<void>> {
    const now = Date.now();
    // A resync lists the journal and checks the switch within seconds: older removals no longer matter to one.
    for (const [port, at] of this.removedAt) if (at < now - REMOVALS_KEPT_MS) this.removedAt.delete(port);
    this.removedAt.set(step.port, now);
    const r = await this.portsAt(step.ovsdb).remove(step.bridge, step.port);
    return r.ok ? r : err(r.error.withContext(`removing memif port ${step.port}`));
  }

  /** Whether the port was removed at or after `time`. */
  removedSince(port: string, time: number): boolean {
    return (this.removedAt.get(port) ?? -Infinity) >= time;
  }

  /** CHECK: every recorded port is on its switch, without an error. */
  async check(steps: readonly SwitchPortStep[]): Promise<Result<void>> {
    for (const step of steps) {
      const state = await this.portsAt(step.ovsdb).state(step.port);
      if (!state.ok) return state;
      if (!state.value) return err(portMissing(step));
      if (state.value.error) return err(portBroken(step, state.value.error));
    }
    return ok(undefined);
  }

  /** GC: removes the settled ports of `network` (owned by `owner`, when given) that no live attachment holds. */
  async gc(network: string, conf: MemifConfig, live: readonly LiveAttachment[], owner?: string): Promise<Result<void>> {
    const ports = this.portsAt(this.ovsdbOf(conf));
    const owned = await ports.listOwned();
    if (!owned.ok) return owned;
    const keep = new Set(live.map((a) => `${a.containerId}\u0000${a.ifname}`));
    const settled = Date.now() - GC_SETTLE_MS;
    const failures: string[] = [];
    for (const p of owned.value) {
      const ids = p.externalIds;
      if (ids['plexus-network'] !== network) continue;
      if (keep.has(`${ids['plexus-container-id']}\u0000${ids['plexus-ifname']}`)) continue;
      if (owner && ids[OWNER_KEY] !== owner) continue;
      if (Number(ids['plexus-created'] ?? 0) > settled) continue;
      const r = await ports.remove(conf.bridge, p.name);
      if (!r.ok) failures.push(r.error.message);
    }
    return failures.length ? err(gcFailed(network, failures)) : ok(undefined);
  }

  /** STATUS: the network's switch answers and has its bridge. */
  async status(conf: MemifConfig): Promise<Result<void>> {
    const has = await this.portsAt(this.ovsdbOf(conf)).hasBridge(conf.bridge);
    if (!has.ok) return err(new CniError(CniCode.PluginNotAvailable, has.error.message, has.error.details));
    if (!has.value) return err(new CniError(CniCode.PluginNotAvailable, `the switch has no bridge ${conf.bridge}`));
    return ok(undefined);
  }

  /** Whether the node's switch (the default database socket) has DPDK up: what memif devices' health may follow. */
  dpdkReady(): Promise<boolean> {
    return this.portsAt(this.defaultOvsdb).dpdkReady();
  }

  close(): void {
    for (const { db } of this.byPath.values()) db.close();
  }

  private switchAt(path: string): Switch {
    let s = this.byPath.get(path);
    if (!s) {
      const db = new OvsdbClient(path);
      // Every connection after the first means the database went away: the switch may have restarted empty.
      db.onConnect(() => {
        if (db.connections > 1) for (const listener of this.reconnectListeners) listener();
      });
      s = { db, ports: new SwitchPorts(db) };
      this.byPath.set(path, s);
    }
    return s;
  }
}

const portMissing = (step: SwitchPortStep): CniError =>
  new CniError(CniCode.Internal, `switch port ${step.port} is missing from bridge ${step.bridge}`);

const portBroken = (step: SwitchPortStep, why: string): CniError =>
  new CniError(CniCode.Internal, `switch port ${step.port} is broken: ${why}`, redactSecret(step.devargs));

const gcFailed = (network: string, failures: readonly string[]): CniError =>
  new CniError(
    CniCode.Internal,
    `GC of memif network ${network} could not remove ${failures.length} port(s)`,
    failures.join('; '),
  );
