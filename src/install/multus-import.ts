/**
 * plexus-install on a Multus node: Multus's settings become plexusd's (an imported config plexusd reads over its own
 * file), its cluster network becomes Plexus's default network, and every setting without an equivalent is named in
 * the log. Nothing is changed when Multus's config cannot be read: the node keeps working as it is.
 */
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Logger } from 'pino';
import { linkFile, replaceFile } from './cni-conf';
import { type ConfFileReader, listConfFiles, readConfFile } from './conf-files';
import { type MultusInstallation, readMultus, resolveClusterNetwork } from './multus-config';
import { carryOver } from './multus-settings';
import { MOVED_ASIDE_SUFFIX } from './multus-takeover';
import { definedFields } from '../common/defined-fields';

export interface MultusImportOptions {
  readonly cniConfDir: string;
  /** The thick daemon's config file. */
  readonly daemonConfig: string;
  /** Where plexusd reads carried-over settings (its importedConfig). */
  readonly importedConfig: string;
  /** The symlink plexusd's defaultNetwork names when the cluster network is a file. */
  readonly defaultNetworkLink: string;
}

export type MultusImport =
  | { readonly kind: 'none' }
  | { readonly kind: 'imported'; readonly multus: MultusInstallation }
  | { readonly kind: 'failed' };

export function importMultus(o: MultusImportOptions, log: Logger): MultusImport {
  const active = listConfFiles(o.cniConfDir) ?? [];
  // After a takeover Multus's config is aside: a later install (a rolling restart) still reads it.
  const read = readMultus(active, o.daemonConfig);
  const multus = read.ok && read.value === undefined ? readMultus(movedAside(o.cniConfDir), o.daemonConfig) : read;
  if (!multus.ok) {
    log.error({ confDir: o.cniConfDir }, `${multus.error.message}; nothing was changed`);
    return { kind: 'failed' };
  }
  if (!multus.value) {
    if (existsSync(o.importedConfig)) {
      rmSync(o.importedConfig, { force: true });
      log.info(
        { importedConfig: o.importedConfig },
        'no Multus on this node any more: the settings carried over from it are removed',
      );
    }
    return { kind: 'none' };
  }
  const found = withHostPaths(multus.value);
  const cluster = resolveClusterNetwork(found.settings, (dir) => listConfFiles(dir));
  if (!cluster.ok) {
    log.error({ multusConfig: found.configFile }, `${cluster.error.message}; nothing was changed`);
    return { kind: 'failed' };
  }
  const carried = carryOver(found, cluster.value, { defaultNetworkLink: o.defaultNetworkLink });
  mkdirSync(dirname(o.importedConfig), { recursive: true, mode: 0o700 });
  if (carried.inlineDefaultNetwork) {
    const file = join(dirname(o.defaultNetworkLink), 'multus-cluster-network.json');
    replaceFile(file, `${JSON.stringify(carried.inlineDefaultNetwork, null, 2)}\n`, 0o600);
    linkFile(o.defaultNetworkLink, file);
  } else if (carried.defaultNetworkFile) {
    linkFile(o.defaultNetworkLink, carried.defaultNetworkFile);
  }
  replaceFile(o.importedConfig, `${JSON.stringify(carried.settings, null, 2)}\n`, 0o600);
  log.info(
    {
      multus: found.mode,
      multusConfig: found.configFile,
      daemonConfig: found.daemonConfigFile,
      importedConfig: o.importedConfig,
      carried: carried.carried,
    },
    "Multus's settings carried over to plexusd",
  );
  for (const d of carried.dropped) log.warn({ multusSetting: d.multus }, `Multus setting not carried over: ${d.why}`);
  for (const w of carried.warnings) log.warn(w);
  log.info(
    "plexusd serves new pods once it moves Multus's config aside (takeOverMultus: true, docs/migrate-from-multus.md); until then Multus does",
  );
  return { kind: 'imported', multus: found };
}

/** Multus configs moved aside by a takeover, read as the runtime would read them if they were back. */
function movedAside(confDir: string): ConfFileReader[] {
  let names: string[];
  try {
    names = readdirSync(confDir);
  } catch {
    return [];
  }
  return names
    .filter((n) => n.endsWith(MOVED_ASIDE_SUFFIX))
    .sort()
    .map((n) => {
      const path = join(confDir, n);
      return {
        path,
        read: () => {
          const f = readConfFile(path);
          return f.kind === 'file' ? f.text : undefined;
        },
      };
    });
}

/**
 * A path as the host sees it. The thick daemon runs in a container and names host files through its mounts
 * (/host/etc/cni/net.d/...): when such a path does not exist here, the same path without "/host" is tried.
 */
function onHost(path: string): string {
  if (existsSync(path) || !path.startsWith('/host/')) return path;
  const stripped = path.slice('/host'.length);
  return existsSync(stripped) ? stripped : path;
}

/** Multus's paths (cluster network, confDir) as the host sees them. */
function withHostPaths(m: MultusInstallation): MultusInstallation {
  const { clusterNetwork, confDir } = m.settings;
  const hostCluster = clusterNetwork?.includes('/') ? onHost(clusterNetwork) : clusterNetwork;
  return {
    ...m,
    settings: {
      ...m.settings,
      confDir: onHost(confDir),
      ...definedFields({ clusterNetwork: hostCluster }),
    },
  };
}
