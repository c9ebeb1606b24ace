/**
 * Multus's sandboxes on a node Plexus took over: their DEL, as Multus v4 would have run it. For each delegate in
 * reverse attach order, libcni's DEL: the plugins of its config last first, each with the network's name and
 * cniVersion, the result libcni cached at ADD as prevResult (`<cniDir>/results/<network>-<container>-<ifname>`), the
 * runtimeConfig of the capabilities it declares (from that cache's capabilityArgs), CNI_ARGS as at ADD. Every
 * delegate is tried even after a failure; then Multus's cache goes, as Multus's own DEL removes it. A delegate whose
 * names libcni would refuse, or whose config runs Plexus itself, is refused: reported naming its cache file, never run.
 */
import { existsSync, rmSync } from 'node:fs';
import type { Logger } from 'pino';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { compareVersions } from '../cni/version';
import { isJsonObject } from '../common/json-object';
import type { PluginCall, PluginOutput } from '../drivers/delegate/exec';
import { findPlugin } from '../drivers/delegate/exec';
import type {
  AdoptedListOptions,
  AdoptedSandbox,
  ForeignDel,
  ForeignDelOutcome,
  ForeignSandboxes,
} from '../engine/foreign-sandboxes';
import { PLEXUS_NETWORK_NAME } from '../networks/nad';
import { AdoptedListing } from './adopted-listing';
import { isPlexusShim, pluginTypeProblem } from './cache-names';
import {
  inDelOrder,
  type LibcniRecord,
  libcniRecordPath,
  readLibcniRecord,
  readRecordSummary,
  recordedAddresses,
  type RecordedNetwork,
  recordedNetworksOf,
} from './libcni-records';
import { type CachedDelegate, readMultusCache } from './multus-cache';
import { removeRuntimeRecordsOfMultus, runtimeAttachedUnder } from './runtime-record';
import { errorMessage } from '../common/error-message';

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

/** One delegate's plugins as they would run: each found, or why the delegate is never run. */
type Resolved = { readonly paths: readonly Result<string>[] } | { readonly refused: string };

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

const REFUSED = 'a delegate in the cache of a sandbox Multus made is refused and never run';

export class MultusSandboxes implements ForeignSandboxes {
  private readonly listing: AdoptedListing;

  constructor(private readonly o: MultusSandboxesOptions) {
    this.listing = new AdoptedListing(o.cacheDir);
    // Read ahead, a batch per turn, so that the first listing (a GC, plexusctl) finds its files read.
    this.refresh().catch((e: unknown) => o.log.warn({ err: errorMessage(e) }, "Multus's caches could not be listed"));
  }

  async del(req: ForeignDel): Promise<ForeignDelOutcome> {
    const cache = readMultusCache(this.o.cacheDir, req.containerId, req.ifname);
    const pod = `${req.args.podNamespace ?? '?'}/${req.args.podName ?? '?'}`;
    if (cache.kind === 'not-a-file')
      this.o.log.warn(
        { pod, containerId: req.containerId, cache: cache.path, reason: cache.reason },
        "where Multus's cache of this sandbox would be is not a file Multus writes: it is left alone",
      );
    if (cache.kind === 'absent' || cache.kind === 'not-a-file') return this.delFromLibcniRecords(req, pod);
    if (cache.kind === 'broken') {
      this.o.log.warn(
        { pod, containerId: req.containerId, cache: cache.path, reason: cache.reason },
        "Multus's cache of this sandbox cannot be read: its DEL follows the pod's annotation and its networks as they are now, as Multus does",
      );
      // Gone once the fallback ran, as Multus removes it: the next DEL is not one of these sandboxes any more.
      return { kind: 'unreadable', what: cache.path };
    }
    for (const r of cache.refused)
      this.o.log.warn({ pod, containerId: req.containerId, cache: cache.path, delegate: r }, REFUSED);
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
    return this.outcome(req, pod, failures);
  }

  /**
   * A sandbox whose Multus cache is gone but whose networks libcni still records: Multus's own DEL failed part-way
   * (it removes its cache after the first attempt, whatever the outcome; libcni keeps the record of each network whose
   * DEL failed), e.g. on a conflist Multus v4.3.0 cached without its plugins' fields. Each recorded network's DEL runs
   * with the config of its ADD, the runtime's interface last (Multus attaches it first).
   */
  private async delFromLibcniRecords(req: ForeignDel, pod: string): Promise<ForeignDelOutcome> {
    const { networks, refused } = recordedNetworksOf(
      this.o.cacheDir,
      req.containerId,
      this.listing.recordFilesOf(req.containerId),
    );
    for (const r of refused)
      this.o.log.warn({ pod, containerId: req.containerId, cache: r.path, reason: r.reason }, REFUSED);
    if (networks.length === 0) return { kind: 'not-mine' };
    const failures: CniError[] = [];
    for (const record of inDelOrder(networks, req.ifname)) {
      const r = await this.delDelegate(req, asDelegate(record));
      if (!r.ok) failures.push(r.error);
    }
    this.o.log.info(
      { pod, containerId: req.containerId, networks: networks.map((r) => r.network), failed: failures.length },
      "a sandbox Multus made is removed from libcni's records of its networks (Multus's cache of it was gone)",
    );
    return this.outcome(req, pod, failures);
  }

  /**
   * A DEL's outcome; once it succeeded, the runtime's records of its call to Multus go too, which its DEL through
   * Plexus leaves (libcni removes the record named as the config it calls now, Plexus's).
   */
  private outcome(req: ForeignDel, pod: string, failures: readonly CniError[]): ForeignDelOutcome {
    if (failures.length > 0) return { kind: 'done', result: err(multusDelFailed(req.containerId, failures)) };
    const { kept } = removeRuntimeRecordsOfMultus(this.o.runtimeCacheDir, req.containerId, req.ifname);
    for (const k of kept)
      this.o.log.warn(
        { pod, containerId: req.containerId, record: k.path, err: k.reason },
        "the runtime's record of its call to Multus stays: plexusd cannot remove it (mount the runtime's CNI cache dir writable)",
      );
    return { kind: 'done', result: ok(undefined) };
  }

  /** Removes an unreadable cache once the engine's fallback DEL ran. */
  forget(what: string): void {
    try {
      rmSync(what, { force: true });
    } catch (e) {
      this.o.log.warn({ cache: what, err: errorMessage(e) }, 'an unreadable Multus cache could not be removed');
    }
  }

  /** Multus's CHECK: each delegate in attach order, its plugins in order, with libcni's cached result. */
  async check(req: ForeignDel): Promise<Result<void> | undefined> {
    const cache = readMultusCache(this.o.cacheDir, req.containerId, req.ifname);
    if (cache.kind !== 'delegates') return undefined;
    const context = `CHECK of ${req.containerId}, which Multus attached`;
    const refused = cache.refused[0];
    if (refused)
      return err(
        new CniError(
          100,
          `${context}: delegate ${refused.position} (${refused.name}) of ${cache.path} ${refused.reason}`,
        ),
      );
    for (const d of cache.delegates) {
      const r = await this.runDelegate('CHECK', req, d);
      if (!r.ok) return err(r.error.withContext(context));
    }
    return ok(undefined);
  }

  list(options: AdoptedListOptions = {}): AdoptedSandbox[] {
    const sandboxes = this.listing.list();
    if (!options.addresses) return sandboxes;
    return sandboxes.map((s) => ({
      ...s,
      networks: s.networks.map((n) => ({ ...n, ips: this.addressesOf(s.containerId, n.ifname) })),
    }));
  }

  /** The addresses libcni recorded for one of a sandbox's interfaces (its record names the network). */
  private addressesOf(containerId: string, ifname: string): string[] {
    for (const file of this.listing.recordFilesOf(containerId)) {
      const summary = readRecordSummary(this.o.cacheDir, file).summary;
      if (summary?.containerId === containerId && summary.ifname === ifname)
        return recordedAddresses(this.o.cacheDir, summary.network, containerId, ifname);
    }
    return [];
  }

  /**
   * Made under `network`: the runtime's record of its call to Multus names it, or it is Plexus's own name, under which
   * the runtime calls GC once Plexus took Multus's place (listing every sandbox it still has, Multus's among them).
   */
  madeUnder(sandbox: AdoptedSandbox, network: string): boolean {
    if (network === PLEXUS_NETWORK_NAME) return true;
    const ifname = sandbox.networks[0]?.ifname ?? '';
    return runtimeAttachedUnder(this.o.runtimeCacheDir, network, sandbox.containerId, ifname);
  }

  /** Reads the caches that changed since the last look, a batch per turn of the event loop. */
  refresh(): Promise<void> {
    return this.listing.refresh();
  }

  /**
   * libcni's DEL of one delegate: its plugins last first; stops at the first failure, as libcni does. Its record goes
   * whatever the outcome: like Multus with its own cache, Plexus gives a sandbox one attempt, so the runtime's retry
   * succeeds (a DEL that can never succeed, a plugin gone, would keep the pod terminating); what a failed plugin
   * held is released by hand. A delegate refused for its plugins is skipped, reported naming its cache file.
   */
  private async delDelegate(req: ForeignDel, d: CachedDelegate): Promise<Result<void>> {
    const r = await this.runDelegate('DEL', req, d);
    const record = libcniRecordPath(this.o.cacheDir, d.network, req.containerId, d.ifname);
    if (record !== undefined) rmSync(record, { force: true });
    return r;
  }

  /**
   * One verb on a delegate's plugins, as libcni runs it: DEL last plugin first, CHECK in order (from 0.4.0). A
   * delegate that runs Plexus is refused: a DEL skips it, reported naming the cache; a CHECK fails on it.
   */
  private async runDelegate(command: 'DEL' | 'CHECK', req: ForeignDel, d: CachedDelegate): Promise<Result<void>> {
    const cached = readLibcniRecord(this.o.cacheDir, d.network, req.containerId, d.ifname);
    const conf = this.configAsRun(req, d, cached);
    const plugins = d.isList ? (conf.plugins as Json[]) : [conf];
    const cniVersion = typeof conf.cniVersion === 'string' ? conf.cniVersion : '';
    if (command === 'CHECK' && compareVersions(cniVersion, '0.4.0') < 0) return ok(undefined);
    const context = (type: string): string => `network ${d.network} (${d.ifname}), plugin ${type}`;
    const resolved = await this.resolvePlugins(plugins);
    if ('refused' in resolved) return this.refused(command, req, d, resolved.refused);
    // A GC names no netns: the one libcni cached at ADD, while it exists.
    const wanted = req.netns !== '' ? req.netns : (cached.netns ?? '');
    const netns = wanted !== '' && existsSync(wanted) ? wanted : '';
    const args = (cached.cniArgs ?? req.args.raw).map(([k, v]) => `${k}=${v}`).join(';');
    const order = plugins.map((plugin, i) => ({ plugin, path: resolved.paths[i]! }));
    for (const { plugin, path } of command === 'DEL' ? order.reverse() : order) {
      const type = pluginType(plugin);
      if (!path.ok) return err(path.error.withContext(context(type)));
      const stdin = JSON.stringify(pluginConfig(plugin, d.network, cniVersion, cached));
      const r = await this.o.exec({
        command,
        type,
        network: d.network,
        path: path.value,
        stdin,
        containerId: req.containerId,
        netns,
        ifname: d.ifname,
        args,
        cniPath: this.o.cniBinDir,
      });
      if (!r.ok) return err(r.error.withContext(context(type)));
    }
    return ok(undefined);
  }

  /** A delegate whose plugins are refused: a CHECK fails on it; a DEL skips it, reported naming its cache file. */
  private refused(command: 'DEL' | 'CHECK', req: ForeignDel, d: CachedDelegate, reason: string): Result<void> {
    const where = `network ${d.network} (${d.ifname}) in ${d.source}`;
    if (command === 'CHECK') return err(new CniError(CniCode.InvalidNetworkConfig, `${where}: ${reason}`));
    const { network, ifname } = d;
    this.o.log.warn({ containerId: req.containerId, cache: d.source, network, ifname, reason }, REFUSED);
    return ok(undefined);
  }

  /** Each plugin found in the bin dir; refused when one is not a plugin name or is Plexus (its type, or its shim linked). */
  private async resolvePlugins(plugins: readonly Json[]): Promise<Resolved> {
    const paths: Result<string>[] = [];
    for (const plugin of plugins) {
      const type = pluginType(plugin);
      const problem = pluginTypeProblem(type);
      if (problem !== undefined) return { refused: problem };
      const path = await findPlugin(type, this.o.cniBinDir);
      if (path.ok && (await isPlexusShim(path.value, this.o.cniBinDir)))
        return { refused: `plugin ${type} is Plexus's own shim: running it would call Plexus recursively` };
      paths.push(path);
    }
    return { paths };
  }

  /**
   * The delegate's config as its ADD ran it. Multus v4.3.0 caches a conflist delegate loaded from a file (its
   * `clusterNetwork` or a `defaultNetworks` entry given as a path to a .conflist) re-encoded through the CNI
   * library's generic types, which keep `type`, `name`, `ipam.type` and little else: run as it is, host-local's DEL
   * fails ("no IP ranges specified") and other IPAMs release nothing (fixed in Multus after v4.3.0, multus-cni PR
   * 1521). libcni's own record of the ADD holds the bytes the plugins were run with: those are used when they are the
   * same network in the same form.
   */
  private configAsRun(req: ForeignDel, d: CachedDelegate, cached: LibcniRecord): Json {
    const multus = JSON.parse(d.config) as Json;
    const ran = cached.config;
    if (!ran || ran.name !== d.network || Array.isArray(ran.plugins) !== d.isList) return multus;
    if (JSON.stringify(ran) !== JSON.stringify(multus))
      this.o.log.info(
        { containerId: req.containerId, network: d.network, ifname: d.ifname },
        "Multus's cache of this network differs from libcni's record of its ADD: the config as the ADD ran it is used",
      );
    return ran;
  }
}

/** A network libcni recorded, as a delegate of Multus's cache would describe it. */
const asDelegate = (r: RecordedNetwork): CachedDelegate => ({
  name: r.network,
  network: r.network,
  config: r.config,
  isList: r.isList,
  ifname: r.ifname,
  ips: [],
  source: r.source,
});

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
