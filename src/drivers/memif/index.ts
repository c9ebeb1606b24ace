/**
 * The native `memif` driver: a pod interface that is no kernel link but a memif socket, served by a port of the node's
 * userspace switch (OVS with DPDK). The switch is the memif server; the pod's application connects as the client.
 *
 * The socket and its secret come from the kubelet device the pod was allocated for the network's resourceName
 * (plexus.io/memif, served by plexusd's device plugin, mounted into the pod), or, without one, from a directory
 * Plexus makes under the network's socketDir. Each change is recorded before it is made: the socket directory, then
 * the port (with everything it was made with, so a switch that lost its ports gets them back from the journal).
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import { memifSecret, MEMIF_SOCKET_FILE } from '../../common/memif';
import { DEFAULT_OVSDB_SOCKET, OvsdbClient } from '../../ovs/ovsdb';
import { OWNER_KEY, redactSecret, SwitchPorts, type DpdkPortSpec, type PortState } from '../../ovs/ports';
import { allocatePodIps } from '../common';
import { attachmentHash } from '../common/attachment-id';
import { onePlugin, type AttachRequest, type Driver, type DriverEnv, type UndoStep } from '../driver';
import { parseMemifConfig, type MemifConfig } from './config';

/** The socket of a memif device the kubelet allocated to the pod. */
export interface MemifDeviceSocket {
  /** Where the switch listens (on the host). */
  readonly hostSocket: string;
  /** Where the pod finds it (the device's mount). */
  readonly podSocket: string;
  readonly secret: string;
}

export interface MemifDriverOptions {
  /**
   * A kubelet device's socket: undefined when the resource is not a memif resource of this plexusd; an error when it
   * is but the device has no allocation on record.
   */
  readonly deviceSocket?: (resourceName: string, deviceID: string) => Result<MemifDeviceSocket> | undefined;
  readonly defaultOvsdbSocket?: string;
  /** external_ids plexus-owner of the ports made (the node's name). */
  readonly owner?: string;
}

export type SwitchPortStep = Extract<UndoStep, { kind: 'deleteSwitchPort' }>;

export interface ResyncReport {
  /** Ports that were missing or broken and were made again. */
  readonly repaired: readonly string[];
  readonly failures: readonly string[];
}

export interface MemifDriver extends Driver<MemifConfig> {
  /**
   * Makes every recorded port that the switch lacks (or reports an error for) again: after ovs-vswitchd or
   * ovsdb-server restarted without them. Ports removed since `listedAt` are left alone (a DEL raced the listing).
   */
  resync(recorded: readonly SwitchPortStep[], listedAt: number): Promise<ResyncReport>;
  /** Whether the node's switch (the default database socket) has DPDK up: what memif devices' health may follow. */
  switchReady(): Promise<boolean>;
  /** Runs resync on every reconnection to a switch and every `intervalMs`; answers a function that stops it. */
  startResync(recorded: () => Promise<readonly SwitchPortStep[]>, intervalMs: number, log: Logger): () => void;
  close(): void;
}

const SOCKET_PATH_MAX = 107;
/** How long a port's removal is remembered, so a resync that listed the journal before it does not make it again. */
const REMOVALS_KEPT_MS = 10 * 60_000;

/** A switch port name for a pod interface: short, unique per attachment (attachment-id.ts), recognisably Plexus's. */
export const memifPortName = (containerId: string, runtimeIfname: string, podIfname: string): string =>
  `pxm${attachmentHash(containerId, runtimeIfname, podIfname, 12)}`;

/** The socket directory's name: container and pod interface, and the attachment's hash when the runtime's is another. */
function socketDirName(req: AttachRequest): string {
  const base = `${req.containerId.slice(0, 24)}-${req.ifname}`;
  return req.runtimeIfname === req.ifname ? base : `${base}-${attachmentHash(req.containerId, req.runtimeIfname, req.ifname, 8)}`;
}

export const memifDevargs = (port: string, socket: string, secret: string): string =>
  `net_memif_${port},role=server,id=0,socket=${socket},socket-abstract=no,secret=${secret}`;

export function createMemifDriver(options: MemifDriverOptions = {}): MemifDriver {
  const switches = new Map<string, { db: OvsdbClient; ports: SwitchPorts }>();
  /** When each port was last removed: a resync that listed the journal before that leaves it alone. */
  const removedAt = new Map<string, number>();
  const switchAt = (path: string): { db: OvsdbClient; ports: SwitchPorts } => {
    let s = switches.get(path);
    if (!s) {
      const db = new OvsdbClient(path);
      s = { db, ports: new SwitchPorts(db) };
      switches.set(path, s);
    }
    return s;
  };
  const ovsdbOf = (conf: MemifConfig): string => conf.ovsdbSocket ?? options.defaultOvsdbSocket ?? DEFAULT_OVSDB_SOCKET;

  const socketFor = async (req: AttachRequest, conf: MemifConfig, env: DriverEnv): Promise<Result<MemifDeviceSocket>> => {
    const device = req.options?.kubeletDevice;
    if (device) {
      const found = options.deviceSocket?.(device.resourceName, device.deviceID);
      if (!found) return err(new CniError(CniCode.InvalidNetworkConfig, `network ${req.network.key} asks for resource ${device.resourceName}, which is not a memif resource of this node's plexusd`, 'list it under resources (kind: memif) in --device-plugin-config'));
      return found;
    }
    const dir = join(conf.socketDir, socketDirName(req));
    const hostSocket = join(dir, MEMIF_SOCKET_FILE);
    await env.record({ kind: 'removeSocketDir', path: dir });
    const secret = memifSecret();
    try {
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(dir, { recursive: true, mode: 0o755 });
      // The client needs the secret too: it lies beside the socket, readable by root only.
      writeFileSync(join(dir, 'secret'), secret, { mode: 0o600 });
    } catch (e) {
      return err(new CniError(CniCode.IoFailure, `cannot make memif socket directory ${dir}: ${(e as Error).message}`));
    }
    return ok({ hostSocket, podSocket: hostSocket, secret });
  };

  /** Whether this node has memif ports at all (one was made, or the journal had some): else a resync reads nothing. */
  let portsSeen = false;
  const attach = async (req: AttachRequest, conf: MemifConfig, env: DriverEnv): Promise<Result<CniResult>> => {
    portsSeen = true;
    const socket = await socketFor(req, conf, env);
    if (!socket.ok) return socket;
    const { hostSocket, podSocket, secret } = socket.value;
    if (hostSocket.includes(',') || Buffer.byteLength(hostSocket) > SOCKET_PATH_MAX) return err(new CniError(CniCode.InvalidNetworkConfig, `memif socket path ${hostSocket} cannot be used: it must have no comma and at most ${SOCKET_PATH_MAX} bytes`));
    const port = memifPortName(req.containerId, req.runtimeIfname, req.ifname);
    const spec: DpdkPortSpec = {
      bridge: conf.bridge,
      port,
      devargs: memifDevargs(port, hostSocket, secret),
      rxQueues: conf.rxQueues,
      externalIds: {
        [OWNER_KEY]: options.owner ?? 'plexus',
        'plexus-network': req.network.key,
        'plexus-container-id': req.containerId,
        'plexus-ifname': req.ifname,
        ...(req.pod.namespace && req.pod.name ? { 'plexus-pod': `${req.pod.namespace}/${req.pod.name}` } : {}),
        'plexus-created': String(Date.now()),
      },
    };
    const ovsdb = ovsdbOf(conf);
    const ipam = await allocatePodIps(req, env, conf.ipam);
    if (!ipam.ok) return ipam;
    await env.record({ kind: 'deleteSwitchPort', ovsdb, ...spec });
    const made = await switchAt(ovsdb).ports.add(spec);
    if (!made.ok) return err(made.error.withContext(`network ${req.network.key}`));
    return ok({
      // No sandbox: the interface is the socket, not a link in the pod's netns.
      interfaces: [{ name: req.ifname, socketPath: podSocket }],
      ips: (ipam.value?.ips ?? []).map((ip) => ({ ...ip, interface: 0 })),
      routes: [],
      ...(ipam.value?.dns ? { dns: ipam.value.dns } : {}),
    });
  };

  const removePort = async (step: SwitchPortStep): Promise<Result<void>> => {
    const now = Date.now();
    // A resync lists the journal and checks the switch within seconds: older removals no longer matter to one.
    for (const [port, at] of removedAt) if (at < now - REMOVALS_KEPT_MS) removedAt.delete(port);
    removedAt.set(step.port, now);
    const r = await switchAt(step.ovsdb).ports.remove(step.bridge, step.port);
    return r.ok ? r : err(r.error.withContext(`removing memif port ${step.port}`));
  };

  const resync = async (recorded: readonly SwitchPortStep[], listedAt: number): Promise<ResyncReport> => {
    const repaired: string[] = [];
    const failures: string[] = [];
    // One listing of Plexus's ports per switch, not one request per port.
    const listings = new Map<string, Result<ReadonlyMap<string, PortState>>>();
    const portsOn = async (ovsdb: string): Promise<Result<ReadonlyMap<string, PortState>>> => {
      let listing = listings.get(ovsdb);
      if (!listing) {
        const owned = await switchAt(ovsdb).ports.listOwned();
        listing = owned.ok ? ok(new Map(owned.value.map((p) => [p.name, p]))) : owned;
        listings.set(ovsdb, listing);
      }
      return listing;
    };
    for (const step of recorded) {
      if ((removedAt.get(step.port) ?? -Infinity) >= listedAt) continue;
      const { ports } = switchAt(step.ovsdb);
      const listing = await portsOn(step.ovsdb);
      if (!listing.ok) {
        failures.push(`${step.port}: ${listing.error.message}`);
        continue;
      }
      const state = listing.value.get(step.port);
      if (state && !state.error) continue;
      if ((removedAt.get(step.port) ?? -Infinity) >= listedAt) continue;
      // A crashed switch leaves its socket file behind, and DPDK will not listen on a path that exists. And a device
      // DPDK failed to attach keeps its name taken until the switch restarts: the port comes back under a new one.
      const socket = /socket=([^,]*)/.exec(step.devargs)?.[1];
      if (socket) rmSync(socket, { force: true });
      const devargs = step.devargs.replace(/^[^,]*/, `net_memif_${step.port}_${Date.now().toString(36)}`);
      const made = await ports.add({ bridge: step.bridge, port: step.port, devargs, rxQueues: step.rxQueues, externalIds: step.externalIds });
      if (made.ok) repaired.push(step.port);
      else failures.push(`${step.port}: ${made.error.message}`);
    }
    return { repaired, failures };
  };

  return {
    type: 'memif',
    capabilities: ['ips', 'deviceID'],
    parse: onePlugin(parseMemifConfig),
    attach,
    async check(attachment) {
      for (const step of attachment.steps) {
        if (step.kind !== 'deleteSwitchPort') continue;
        const state = await switchAt(step.ovsdb).ports.state(step.port);
        if (!state.ok) return state;
        if (!state.value) return err(new CniError(CniCode.Internal, `switch port ${step.port} is missing from bridge ${step.bridge}`));
        if (state.value.error) return err(new CniError(CniCode.Internal, `switch port ${step.port} is broken: ${state.value.error}`, redactSecret(step.devargs)));
      }
      return ok(undefined);
    },
    async gc(network, live) {
      const conf = parseMemifConfig(network.plugins[0]!);
      if (!conf.ok) return ok(undefined);
      const { ports } = switchAt(ovsdbOf(conf.value));
      const owned = await ports.listOwned();
      if (!owned.ok) return owned;
      const keep = new Set(live.map((a) => `${a.containerId}\u0000${a.ifname}`));
      // A port younger than a minute may belong to an ADD whose record is not committed yet.
      const settled = Date.now() - 60_000;
      const failures: string[] = [];
      for (const p of owned.value) {
        const ids = p.externalIds;
        if (ids['plexus-network'] !== network.key || keep.has(`${ids['plexus-container-id']}\u0000${ids['plexus-ifname']}`)) continue;
        if (options.owner && ids[OWNER_KEY] !== options.owner) continue;
        if (Number(ids['plexus-created'] ?? 0) > settled) continue;
        const r = await ports.remove(conf.value.bridge, p.name);
        if (!r.ok) failures.push(r.error.message);
      }
      return failures.length ? err(new CniError(CniCode.Internal, `GC of memif network ${network.key} could not remove ${failures.length} port(s)`, failures.join('; '))) : ok(undefined);
    },
    async status(network) {
      const conf = parseMemifConfig(network.plugins[0]!);
      if (!conf.ok) return conf;
      const has = await switchAt(ovsdbOf(conf.value)).ports.hasBridge(conf.value.bridge);
      if (!has.ok) return err(new CniError(CniCode.PluginNotAvailable, has.error.message, has.error.details));
      return has.value ? ok(undefined) : err(new CniError(CniCode.PluginNotAvailable, `the switch has no bridge ${conf.value.bridge}`));
    },
    undo: {
      deleteSwitchPort: (step) => removePort(step),
      removeSocketDir: async (step) => {
        try {
          rmSync(step.path, { recursive: true, force: true });
          return ok(undefined);
        } catch (e) {
          return err(new CniError(CniCode.IoFailure, `cannot remove memif socket directory ${step.path}: ${(e as Error).message}`));
        }
      },
    },
    resync,
    switchReady: () => switchAt(options.defaultOvsdbSocket ?? DEFAULT_OVSDB_SOCKET).ports.dpdkReady(),
    startResync(recorded, intervalMs, log) {
      let running = false;
      let stopped = false;
      let listed = false;
      const run = async (why: string): Promise<void> => {
        // After the first look, a node that never had a memif port does not read its journal every interval.
        if (running || stopped || (listed && !portsSeen)) return;
        running = true;
        try {
          const listedAt = Date.now();
          const steps = await recorded();
          listed = true;
          if (steps.length === 0) return;
          portsSeen = true;
          const report = await resync(steps, listedAt);
          if (report.repaired.length) log.warn({ ports: report.repaired, why }, 'memif ports the switch had lost were made again from the journal');
          if (report.failures.length) log.warn({ failures: report.failures, why }, 'memif ports could not be checked or made again');
        } catch (e) {
          log.warn({ err: (e as Error).message }, 'memif port resync failed');
        } finally {
          running = false;
        }
      };
      const seen = new Set<OvsdbClient>();
      const hook = (): void => {
        for (const { db } of switches.values()) {
          if (seen.has(db)) continue;
          seen.add(db);
          // Every connection after the first means the database went away: the switch may have restarted empty.
          db.onConnect(() => {
            if (db.connections > 1) void run('reconnected to the switch database');
          });
        }
      };
      const timer = setInterval(() => {
        hook();
        void run('periodic check');
      }, intervalMs);
      timer.unref();
      hook();
      void run('start');
      return () => {
        stopped = true;
        clearInterval(timer);
      };
    },
    close() {
      for (const { db } of switches.values()) db.close();
    },
  };
}
