/**
 * Multus's sandboxes on a node Plexus took over: their DEL, as Multus v4 would have run it. For each delegate in
 * reverse attach order, libcni's DEL: the plugins of its config last first, each with the network's name and
 * cniVersion, the result libcni cached at ADD as prevResult (`<cniDir>/results/<network>-<container>-<ifname>`), the
 * runtimeConfig of the capabilities it declares (from that cache's capabilityArgs), CNI_ARGS as at ADD. Every
 * delegate is tried even after a failure; then Multus's cache goes, as Multus's own DEL removes it.
 */
import { existsSync, rmSync } from 'node:fs';
import type { Logger } from 'pino';
import { CniError, err, ok, type Result } from '../cni/errors';
import { compareVersions } from '../cni/version';
import type { PluginCall, PluginOutput } from '../drivers/delegate/exec';
import { findPlugin } from '../drivers/delegate/exec';
import type {
  AdoptedListing,
  AdoptedSandbox,
  ForeignDel,
  ForeignDelOutcome,
  ForeignSandboxes,
} from '../engine/foreign-sandboxes';
import {
  containersWithLibcniRecords,
  type LibcniRecord,
  libcniRecordPath,
  readLibcniRecord,
  recordedAddresses,
  type RecordedNetwork,
  recordedNetworksOf,
} from './libcni-records';
import { type CachedDelegate, listMultusCaches, readMultusCache } from './multus-cache';
import { isJsonObject } from '../common/json-object';
import { runtimeAttachedUnder } from './runtime-record';

export interface MultusSandboxesOptions {
  /** Multus's cniDir (its default: /var/lib/cni/multus). */
  readonly cacheDir: string;
  /** The runtime's libcni cache (libcni's default: /var/lib/cni), whose records name the network Multus ran as. */
  readonly runtimeCacheDir: string;
  /** Where the delegates' plugins are (Multus's binDir). */
  readonly cniBinDir: string;
  /** Runs one plugin (the delegate driver's execPlugin, within its limits). */
  readonly exec: (call: PluginCall) => Promise<Result<PluginOutput>>;
  readonly log: Logger;
}

type Json = Record<string, unknown>;

/** The DEL of a sandbox Multus made failed in some of its plugins: the first failure's code, every message. */
function multusDelFailed(containerId: string, failures: readonly CniError[]): CniError {
  const messages = failures.map((f) => f.message).join(' / ');
  return new CniError(
    failures[0]!.code,
    `DEL of ${containerId}, which Multus attached: ${messages}`,
    "Multus's cache of it is removed: a retry succeeds; what the failing plugin held stays until removed by hand",
  );
}

/** A plugin's `type` as text; a non-string one (a malformed config) as its JSON, so the error names what it was. */
function pluginType(plugin: Json): string {
  if (typeof plugin.type === 'string') return plugin.type;
  return plugin.type === undefined || plugin.type === null ? '' : JSON.stringify(plugin.type);
}

export class MultusSandboxes implements ForeignSandboxes {
  constructor(private readonly o: MultusSandboxesOptions) {}

  async del(req: ForeignDel): Promise<ForeignDelOutcome> {
    const cache = readMultusCache(this.o.cacheDir, req.containerId, req.ifname);
    const pod = `${req.args.podNamespace ?? '?'}/${req.args.podName ?? '?'}`;
    if (cache.kind === 'absent') return this.delFromLibcniRecords(req, pod);
    if (cache.kind === 'broken') {
      this.o.log.warn(
        { pod, containerId: req.containerId, cache: cache.path, reason: cache.reason },
        "Multus's cache of this sandbox cannot be read: its DEL follows the pod's annotation and its networks as they are now, as Multus does",
      );
      // Gone once the fallback ran, as Multus removes it: the next DEL is not one of these sandboxes any more.
      return { kind: 'unreadable', what: cache.path };
    }
    const failures: CniError[] = [];
    for (const delegate of [...cache.delegates].reverse()) {
      const r = await this.delDelegate(req, delegate);
      if (!r.ok) failures.push(r.error);
    }
    rmSync(cache.path, { force: true });
    this.o.log.info(
      { pod, containerId: req.containerId, networks: cache.delegates.map((d) => d.name), failed: failures.length },
      'a sandbox Multus made is removed as Multus would have removed it',
    );
    if (failures.length === 0) return { kind: 'done', result: ok(undefined) };
    return { kind: 'done', result: err(multusDelFailed(req.containerId, failures)) };
  }

  /**
   * A sandbox whose Multus cache is gone but whose networks libcni still records: Multus's own DEL failed part-way
   * (it removes its cache after the first attempt, whatever the outcome; libcni keeps the record of each network whose
   * DEL failed), e.g. on a conflist Multus v4.3.0 cached without its plugins' fields. Each recorded network's DEL runs
   * with the config of its ADD, the runtime's interface last (Multus attaches it first).
   */
  private async delFromLibcniRecords(req: ForeignDel, pod: string): Promise<ForeignDelOutcome> {
    const records = recordedNetworksOf(this.o.cacheDir, req.containerId);
    if (records.length === 0) return { kind: 'not-mine' };
    const failures: CniError[] = [];
    for (const record of inDelOrder(records, req.ifname)) {
      const r = await this.delDelegate(req, asDelegate(record));
      if (!r.ok) failures.push(r.error);
    }
    this.o.log.info(
      { pod, containerId: req.containerId, networks: records.map((r) => r.network), failed: failures.length },
      "a sandbox Multus made is removed from libcni's records of its networks (Multus's cache of it was gone)",
    );
    if (failures.length === 0) return { kind: 'done', result: ok(undefined) };
    return { kind: 'done', result: err(multusDelFailed(req.containerId, failures)) };
  }

  /** Removes an unreadable cache once the engine's fallback DEL ran. */
  forget(what: string): void {
    rmSync(what, { force: true });
  }

  /** Multus's CHECK: each delegate in attach order, its plugins in order, with libcni's cached result. */
  async check(req: ForeignDel): Promise<Result<void> | undefined> {
    const cache = readMultusCache(this.o.cacheDir, req.containerId, req.ifname);
    if (cache.kind !== 'delegates') return undefined;
    for (const d of cache.delegates) {
      const r = await this.runDelegate('CHECK', req, d);
      if (!r.ok) return err(r.error.withContext(`CHECK of ${req.containerId}, which Multus attached`));
    }
    return ok(undefined);
  }

  list(listing: AdoptedListing = {}): AdoptedSandbox[] {
    const cached = listMultusCaches(this.o.cacheDir);
    const recordedOnly = containersWithLibcniRecords(this.o.cacheDir).filter((id) => !cached.includes(id));
    return [...this.listCached(cached, listing), ...recordedOnly.flatMap((id) => this.listRecorded(id, listing))];
  }

  /** The runtime ran Multus's config under its name for the runtime's interface, the first network's. */
  madeUnder(sandbox: AdoptedSandbox, network: string): boolean {
    const ifname = sandbox.networks[0]?.ifname ?? '';
    return runtimeAttachedUnder(this.o.runtimeCacheDir, network, sandbox.containerId, ifname);
  }

  /** A sandbox only libcni's records still hold (see delFromLibcniRecords). */
  private listRecorded(containerId: string, listing: AdoptedListing): AdoptedSandbox[] {
    // In attach order, as far as the records tell it (CNI_IFNAME is not known here: Multus's default, eth0).
    const records = inDelOrder(recordedNetworksOf(this.o.cacheDir, containerId), 'eth0').reverse();
    const first = records[0];
    if (!first) return [];
    return [
      this.adopted(
        containerId,
        records.map(asDelegate),
        readLibcniRecord(this.o.cacheDir, first.network, containerId, first.ifname),
        listing,
      ),
    ];
  }

  private listCached(containerIds: readonly string[], listing: AdoptedListing): AdoptedSandbox[] {
    return containerIds.flatMap((containerId) => {
      const cache = readMultusCache(this.o.cacheDir, containerId, 'eth0');
      if (cache.kind !== 'delegates') return [];
      const first = cache.delegates[0]!;
      return [
        this.adopted(
          containerId,
          cache.delegates,
          readLibcniRecord(this.o.cacheDir, networkOf(first), containerId, first.ifname),
          listing,
        ),
      ];
    });
  }

  /** What plexusctl and the orphan sweep are told of a sandbox: its networks, and its pod and netns as libcni recorded. */
  private adopted(
    containerId: string,
    delegates: readonly CachedDelegate[],
    cached: LibcniRecord,
    listing: AdoptedListing,
  ): AdoptedSandbox {
    const arg = (key: string): string | undefined => cached.cniArgs?.find(([k]) => k === key)?.[1];
    const [namespace, name, uid] = [arg('K8S_POD_NAMESPACE'), arg('K8S_POD_NAME'), arg('K8S_POD_UID')];
    return {
      containerId,
      maker: 'multus',
      networks: delegates.map((d) => ({
        name: d.name,
        ifname: d.ifname,
        ...(listing.addresses ? { ips: recordedAddresses(this.o.cacheDir, networkOf(d), containerId, d.ifname) } : {}),
      })),
      ...(namespace && name ? { pod: { namespace, name, ...(uid ? { uid } : {}) } } : {}),
      ...(cached.netns ? { netns: cached.netns } : {}),
    };
  }

  /**
   * libcni's DEL of one delegate: its plugins last first; stops at the first failure, as libcni does. Its record goes
   * whatever the outcome: like Multus with its own cache, Plexus gives a sandbox one attempt, so the runtime's retry
   * succeeds (a DEL that can never succeed, a plugin gone, would keep the pod terminating); what a failed plugin
   * held is released by hand.
   */
  private async delDelegate(req: ForeignDel, d: CachedDelegate): Promise<Result<void>> {
    const r = await this.runDelegate('DEL', req, d);
    rmSync(libcniRecordPath(this.o.cacheDir, networkOf(d), req.containerId, d.ifname), { force: true });
    return r;
  }

  /** One verb on a delegate's plugins, as libcni runs it: DEL last plugin first, CHECK in order (from 0.4.0). */
  private async runDelegate(command: 'DEL' | 'CHECK', req: ForeignDel, d: CachedDelegate): Promise<Result<void>> {
    const network = networkOf(d);
    const cached = readLibcniRecord(this.o.cacheDir, network, req.containerId, d.ifname);
    const conf = this.configAsRun(req, d, network, cached);
    const plugins = d.isList ? (conf.plugins as Json[]) : [conf];
    const cniVersion = typeof conf.cniVersion === 'string' ? conf.cniVersion : '';
    if (command === 'CHECK' && compareVersions(cniVersion, '0.4.0') < 0) return ok(undefined);
    // A GC names no netns: the one libcni cached at ADD, while it exists.
    const wanted = req.netns !== '' ? req.netns : (cached.netns ?? '');
    const netns = wanted !== '' && existsSync(wanted) ? wanted : '';
    const args = (cached.cniArgs ?? req.args.raw).map(([k, v]) => `${k}=${v}`).join(';');
    for (const plugin of command === 'DEL' ? [...plugins].reverse() : plugins) {
      const type = pluginType(plugin);
      const path = await findPlugin(type, this.o.cniBinDir);
      const context = `network ${network} (${d.ifname}), plugin ${type}`;
      if (!path.ok) return err(path.error.withContext(context));
      const stdin = JSON.stringify(pluginConfig(plugin, network, cniVersion, cached));
      const r = await this.o.exec({
        command,
        type,
        network,
        path: path.value,
        stdin,
        containerId: req.containerId,
        netns,
        ifname: d.ifname,
        args,
        cniPath: this.o.cniBinDir,
      });
      if (!r.ok) return err(r.error.withContext(context));
    }
    return ok(undefined);
  }

  /**
   * The delegate's config as its ADD ran it. Multus v4.3.0 caches a conflist delegate loaded from a file (its
   * `clusterNetwork` or a `defaultNetworks` entry given as a path to a .conflist) re-encoded through the CNI
   * library's generic types, which keep `type`, `name`, `ipam.type` and little else: run as it is, host-local's DEL
   * fails ("no IP ranges specified") and other IPAMs release nothing (fixed in Multus after v4.3.0, multus-cni PR
   * 1521). libcni's own record of the ADD holds the bytes the plugins were run with: those are used when they are the
   * same network in the same form.
   */
  private configAsRun(req: ForeignDel, d: CachedDelegate, network: string, cached: LibcniRecord): Json {
    const multus = JSON.parse(d.config) as Json;
    const ran = cached.config;
    if (!ran || ran.name !== network || Array.isArray(ran.plugins) !== d.isList) return multus;
    if (JSON.stringify(ran) !== JSON.stringify(multus))
      this.o.log.info(
        { containerId: req.containerId, network, ifname: d.ifname },
        "Multus's cache of this network differs from libcni's record of its ADD: the config as the ADD ran it is used",
      );
    return ran;
  }
}

/** A network libcni recorded, as a delegate of Multus's cache would describe it. */
const asDelegate = (r: RecordedNetwork): CachedDelegate => ({
  name: r.network,
  config: r.config,
  isList: r.isList,
  ifname: r.ifname,
  ips: [],
});

/** Reverse attach order, as far as the records tell it: other interfaces by name, last first; the runtime's last. */
const inDelOrder = (records: readonly RecordedNetwork[], runtimeIfname: string): RecordedNetwork[] =>
  [...records].sort((a, b) =>
    a.ifname === runtimeIfname
      ? 1
      : b.ifname === runtimeIfname
        ? -1
        : b.ifname.localeCompare(a.ifname, 'en', { numeric: true }),
  );

/** The network's CNI name, as libcni names its cache files. */
function networkOf(d: CachedDelegate): string {
  const name = (JSON.parse(d.config) as Json).name;
  return typeof name === 'string' ? name : d.name;
}

/** What libcni's buildOneConfig makes of a plugin: name, cniVersion, prevResult, the declared capabilities' values. */
function pluginConfig(plugin: Json, network: string, cniVersion: string, cached: LibcniRecord): Json {
  const config: Json = { ...plugin, name: network, cniVersion };
  // A cached result on DEL came with spec 0.4.0.
  if (cached.result && compareVersions(cniVersion, '0.4.0') >= 0) config.prevResult = cached.result;
  const declared = isJsonObject(plugin.capabilities)
    ? Object.entries(plugin.capabilities)
        .filter(([, on]) => on === true)
        .map(([c]) => c)
    : [];
  const runtimeConfig = Object.fromEntries(
    declared.flatMap((c) =>
      cached.capabilityArgs && c in cached.capabilityArgs ? [[c, cached.capabilityArgs[c]]] : [],
    ),
  );
  if (Object.keys(runtimeConfig).length > 0) config.runtimeConfig = runtimeConfig;
  return config;
}
