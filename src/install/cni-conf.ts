/**
 * What Plexus puts on a node for its container runtime, and how: the shim in the CNI bin dir, Plexus's conflist in
 * the CNI conf dir, and the node's primary CNI config (the one the runtime used before Plexus) found and left in place
 * as the cluster default network. Every file is written to a temporary name in the same directory and renamed over
 * the old one, so a runtime never reads half a file and a shim being exec'd never blocks its replacement.
 */
import {
  closeSync,
  existsSync,
  fchmodSync,
  fsyncSync,
  openSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeSync,
} from 'node:fs';
import { basename, join } from 'node:path';
import { ok, type Result } from '../common/result';
import { parseNetworkConfig, PLEXUS_NETWORK_NAME, PLEXUS_PLUGIN_TYPE } from '../networks/nad';
import { CNI_CONF_EXTENSIONS, type InstallProblem, problem } from './conf-files';
import { MULTUS_TYPES } from './multus-config';
import { errorMessage } from '../common/error-message';
import { definedFields } from '../common/defined-fields';

/** Plexus's own conflist: "00-" so it sorts before every other file the runtime reads. */
export const PLEXUS_CONFLIST = '00-plexus.conflist';
export const SHIM_NAME = 'plexus-cni';

/**
 * How long the installed shim waits for plexusd: long enough for a rolling upgrade (the old daemon drains, the new
 * pod's installer runs, the new daemon syncs its caches) to cost no sandbox a failure.
 */
export const DAEMON_WAIT_SECONDS = 60;

export type { InstallProblem };

export interface PrimaryConfig {
  readonly path: string;
  readonly cniVersion: string;
  /** The config's CNI network name. */
  readonly name: string;
}

/** Whether a config runs one of these plugin types. */
function runsPluginOf(text: string, types: ReadonlySet<string>): boolean {
  try {
    const conf = JSON.parse(text) as Record<string, unknown>;
    const plugins = Array.isArray(conf.plugins) ? (conf.plugins as unknown[]) : [conf];
    return plugins.some(
      (p) => typeof p === 'object' && p !== null && types.has((p as Record<string, unknown>).type as string),
    );
  } catch {
    return false;
  }
}
const PLEXUS_TYPES: ReadonlySet<string> = new Set([PLEXUS_PLUGIN_TYPE]);
const isPlexusConfig = (text: string): boolean => runsPluginOf(text, PLEXUS_TYPES);

/**
 * The config file the runtime would use if Plexus were not there: libcni's order (file names sorted, `.conf`,
 * `.conflist` and `.json` only), skipping Plexus's own file and any config that runs plexus-cni, and Multus's (whose
 * cluster network multus-config.ts resolves, as Multus's own "auto" mode skips them). Like the runtime, the
 * first candidate must parse: a broken primary config is reported, not skipped (the runtime would not skip it either).
 * Undefined when there is none yet (the cluster's network plugin has not written it).
 */
export function findPrimaryConfig(confDir: string): Result<PrimaryConfig | undefined, InstallProblem> {
  let names: string[];
  try {
    names = readdirSync(confDir);
  } catch (e) {
    return problem(`cannot read the CNI conf dir ${confDir}: ${errorMessage(e)}`);
  }
  for (const name of names.filter((n) => CNI_CONF_EXTENSIONS.some((ext) => n.endsWith(ext))).sort()) {
    if (name === PLEXUS_CONFLIST) continue;
    const path = join(confDir, name);
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (e) {
      // A directory or a dangling link with a CNI extension: libcni reads files only.
      if ((e as NodeJS.ErrnoException).code === 'EISDIR' || (e as NodeJS.ErrnoException).code === 'ENOENT') continue;
      return problem(`cannot read ${path}: ${errorMessage(e)}`);
    }
    if (isPlexusConfig(text) || runsPluginOf(text, MULTUS_TYPES)) continue;
    const parsed = parseNetworkConfig(text, path, basename(name).replace(/\.[^.]*$/, ''), 'the file');
    if (!parsed.ok) {
      const details = parsed.error.details ? ` (${parsed.error.details})` : '';
      return problem(`the node's primary CNI config ${path} is not usable: ${parsed.error.message}${details}`);
    }
    return ok({ path, cniVersion: parsed.value.cniVersion, name: parsed.value.cniName });
  }
  return ok(undefined);
}

export interface PlexusConflistOptions {
  readonly cniVersion: string;
  readonly socketPath: string;
  /** How long the shim waits for a daemon being restarted or upgraded before answering 11. */
  readonly daemonWaitSeconds?: number;
}

/**
 * Plexus's conflist. The capabilities make the runtime pass the pod's annotations (secondary networks) and what the
 * default network may need from it (static IPs and MAC, port mappings, bandwidth).
 */
export function plexusConflist(options: PlexusConflistOptions): string {
  return `${JSON.stringify(
    {
      cniVersion: options.cniVersion,
      name: PLEXUS_NETWORK_NAME,
      plugins: [
        {
          type: PLEXUS_PLUGIN_TYPE,
          socketPath: options.socketPath,
          ...definedFields({ daemonWaitSeconds: options.daemonWaitSeconds }),
          capabilities: {
            'io.kubernetes.cri.pod-annotations': true,
            ips: true,
            mac: true,
            portMappings: true,
            bandwidth: true,
          },
        },
      ],
    },
    null,
    2,
  )}\n`;
}

/**
 * Writes `content` to `path` by write-then-rename in the same directory (fsynced before the rename). Returns false,
 * writing nothing, when the file already holds exactly that content: a runtime watching the directory sees no change.
 */
export function replaceFile(path: string, content: Buffer | string, mode: number): boolean {
  const bytes = Buffer.from(content);
  try {
    if (readFileSync(path).equals(bytes)) return false;
  } catch {
    /* absent: written below */
  }
  // A dot name with no CNI extension: neither the runtime nor findPrimaryConfig reads it while it is being written.
  const tmp = join(path, '..', `.${basename(path)}.${process.pid}.tmp`);
  const fd = openSync(tmp, 'w', mode);
  let written = false;
  try {
    fchmodSync(fd, mode); // whatever the umask
    for (let off = 0; off < bytes.length;) off += writeSync(fd, bytes, off);
    fsyncSync(fd);
    written = true;
  } finally {
    closeSync(fd);
    if (!written) rmSync(tmp, { force: true });
  }
  try {
    // rename(2) swaps the directory entry: a shim being exec'd keeps running its old inode (no ETXTBSY), the next exec
    // gets the new file.
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
  return true;
}

/** Installs the shim binary into the CNI bin dir. Returns whether the file changed. */
export function installShim(shim: string, cniBinDir: string): boolean {
  return replaceFile(join(cniBinDir, SHIM_NAME), readFileSync(shim), 0o755);
}

/** Removes Plexus's conflist (only if it is Plexus's) and the shim. Returns what was removed. */
export function uninstall(confDir: string, cniBinDir: string): string[] {
  const removed: string[] = [];
  const conflist = join(confDir, PLEXUS_CONFLIST);
  if (existsSync(conflist) && isPlexusConfig(readFileSync(conflist, 'utf8'))) {
    rmSync(conflist);
    removed.push(conflist);
  }
  const shim = join(cniBinDir, SHIM_NAME);
  if (existsSync(shim)) {
    rmSync(shim);
    removed.push(shim);
  }
  return removed;
}

/** Points `link` at `target` (a symlink replaced by rename, so a reader never finds it missing). */
export function linkFile(link: string, target: string): boolean {
  try {
    if (readlinkSync(link) === target) return false;
  } catch {
    /* absent or not a link: replaced below */
  }
  const tmp = join(link, '..', `.${basename(link)}.${process.pid}.tmp`);
  rmSync(tmp, { force: true });
  symlinkSync(target, tmp);
  renameSync(tmp, link);
  return true;
}

/**
 * The cniVersion of the default network when it is a CNI config file (`defaultNetwork` an absolute path): the runtime
 * that used that file read it. Undefined for a NAD; a problem when the file cannot be read or used.
 */
export function defaultNetworkFileVersion(
  defaultNetwork: string | undefined,
): Result<string | undefined, InstallProblem> {
  if (!defaultNetwork?.startsWith('/')) return ok(undefined);
  let text: string;
  try {
    text = readFileSync(defaultNetwork, 'utf8');
  } catch (e) {
    return problem(`the default network's CNI config file ${defaultNetwork} cannot be read: ${errorMessage(e)}`);
  }
  const parsed = parseNetworkConfig(text, defaultNetwork, 'default', 'the file');
  if (!parsed.ok)
    return problem(`the default network's CNI config file ${defaultNetwork} is not usable: ${parsed.error.message}`);
  return ok(parsed.value.cniVersion);
}

/** The conflist plexusd writes once it is ready (--install-cni-config), at the version runtime-cni-version.ts chose. */
export const conflistForDaemon = (cniVersion: string, socketPath: string): string =>
  plexusConflist({ cniVersion, socketPath, daemonWaitSeconds: DAEMON_WAIT_SECONDS });
