/**
 * Where the CNI reference plugins are, the one place tests and benchmarks ask; and a runtime's CNI plugin directory,
 * as the tests' nodes and daemons are given one.
 *
 * The reference plugins are 1.9.1 (CNI 0.1.0 to 1.1.0, with STATUS): what a user compares Plexus against today, what
 * `npm run bench` measures beside Plexus and what the delegation tests exec. $PLEXUS_CNI_PLUGINS wins (a directory of
 * plugins, or a .tar.xz of one); else ../shared/cni/plugins-1.9.1.tar.xz. A tarball is unpacked once into a cache under
 * the temp directory, keyed by its size and mtime, like the Kubernetes binaries (k8s-binaries.ts).
 *
 * Debian bookworm's package (1.1.1, CNI up to 1.0.0: no STATUS, no GC) stays in /usr/lib/cni, from scripts/setup.sh:
 * the nodes' own networks in the heavier tests run it, and the delegation tests check it still works.
 */
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  linkSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { ROOT, SHIM } from './daemon';

/** Debian bookworm's containernetworking-plugins 1.1.1, where scripts/setup.sh installs them. */
export const DEBIAN_PLUGINS = '/usr/lib/cni';
/** The reference plugins 1.9.1 as ../shared holds them. */
export const SHARED_REFERENCE_TARBALL = resolve(ROOT, '../shared/cni/plugins-1.9.1.tar.xz');

export interface ReferencePlugins {
  /** The directory of plugin binaries; undefined when there is none. */
  readonly dir: string | undefined;
  /** Where it came from, for messages: "$PLEXUS_CNI_PLUGINS=/x" or "../shared/cni/plugins-1.9.1.tar.xz". */
  readonly source: string;
  /** Why there is no directory. */
  readonly problem?: string;
}

/** A .tar.xz of plugins unpacked into the cache (once: a later call finds it there); its directory. */
function unpacked(tarball: string): string {
  const st = statSync(tarball);
  const name = basename(tarball).replace(/\.tar\.xz$/, '');
  const cached = join(tmpdir(), 'plexus-cni-plugins', `${name}-${st.size}-${Math.floor(st.mtimeMs)}`);
  if (existsSync(cached)) return cached;
  const partial = `${cached}.${process.pid}.partial`;
  rmSync(partial, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  execFileSync('tar', ['-xJf', tarball, '-C', partial]);
  try {
    renameSync(partial, cached); // whole or absent, even with two test runs at once
  } catch (e) {
    rmSync(partial, { recursive: true, force: true });
    if (!existsSync(cached)) throw e; // another run won the race; its copy is the same
  }
  return cached;
}

/** Where this run's reference plugins are (unpacking them on first use), or why there are none. */
export function referencePluginsDir(env: NodeJS.ProcessEnv = process.env): ReferencePlugins {
  const explicit = env.PLEXUS_CNI_PLUGINS;
  const source = explicit ? `$PLEXUS_CNI_PLUGINS=${explicit}` : '../shared/cni/plugins-1.9.1.tar.xz';
  const path = explicit ? resolve(explicit) : SHARED_REFERENCE_TARBALL;
  if (!existsSync(path)) return { dir: undefined, source, problem: `${path} is missing` };
  if (statSync(path).isDirectory()) return { dir: path, source };
  if (!path.endsWith('.tar.xz'))
    return { dir: undefined, source, problem: `${path} is neither a directory nor .tar.xz` };
  try {
    return { dir: unpacked(path), source };
  } catch (e) {
    return { dir: undefined, source, problem: `${path} could not be unpacked: ${(e as Error).message}` };
  }
}

/** Why the reference plugins are not available (a prerequisite's reason), or undefined when they are. */
export function referencePluginsMissing(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const where = referencePluginsDir(env);
  if (where.dir) return undefined;
  return `the CNI reference plugins 1.9.1 (${where.problem}; set PLEXUS_CNI_PLUGINS or put ../shared beside the checkout)`;
}

/** The directory of the reference plugins 1.9.1; throws, with the reason, when there is none. */
export function referencePlugins(env: NodeJS.ProcessEnv = process.env): string {
  const where = referencePluginsDir(env);
  if (!where.dir) throw new Error(referencePluginsMissing(env));
  return where.dir;
}

/** Why Debian's plugins (scripts/setup.sh) are not installed, or undefined when they are. */
export const debianPluginsMissing = (): string | undefined =>
  existsSync(join(DEBIAN_PLUGINS, 'bridge')) ? undefined : `Debian's containernetworking-plugins in ${DEBIAN_PLUGINS}`;

/** Makes `binDir` (and its parents) with every plugin of `plugins` (Debian's by default) linked in; returns it. */
export function referencePluginDir(binDir: string, plugins = DEBIAN_PLUGINS): string {
  mkdirSync(binDir, { recursive: true });
  for (const f of readdirSync(plugins)) symlinkSync(join(plugins, f), join(binDir, f));
  return binDir;
}

/**
 * Makes `binDir` (and its parents) with every plugin of `plugins` (Debian's by default) hard-linked in (copied across
 * filesystems): files a container that mounts the directory can exec too, where a symlink would point outside it.
 */
export function containerPluginDir(binDir: string, plugins = DEBIAN_PLUGINS): string {
  mkdirSync(binDir, { recursive: true });
  for (const f of readdirSync(plugins)) {
    try {
      linkSync(join(plugins, f), join(binDir, f));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EXDEV') throw e;
      copyFileSync(join(plugins, f), join(binDir, f));
    }
  }
  return binDir;
}

/** Makes `binDir` with Debian's plugins and a copy of bin/plexus-cni, as a Plexus node's runtime has; returns it. */
export function plexusPluginDir(binDir: string): string {
  referencePluginDir(binDir);
  copyFileSync(SHIM, join(binDir, 'plexus-cni'));
  return binDir;
}

/** One call a spied plugin received: which plugin, CNI_COMMAND, and its stdin parsed. */
export interface PluginCall {
  readonly plugin: string;
  readonly command: string;
  readonly stdin: Record<string, unknown>;
}

export interface SpiedPlugins {
  readonly binDir: string;
  /** Every call so far, in the order they came. */
  readonly calls: () => PluginCall[];
}

/**
 * Makes `<dir>/bin`, where every plugin of `plugins` is a spy: a script that saves its CNI_COMMAND and stdin under
 * `<dir>/calls`, then execs the real plugin with them. A plugin that execs another (bridge its IPAM) through CNI_PATH
 * set to the bin dir reaches that one's spy too. The caller removes `dir`.
 */
export function spiedPluginDir(plugins: string, dir: string): SpiedPlugins {
  const binDir = join(dir, 'bin');
  const logDir = join(dir, 'calls');
  mkdirSync(binDir, { recursive: true });
  mkdirSync(logDir, { recursive: true });
  for (const plugin of readdirSync(plugins)) {
    const save = `f=$(mktemp "${logDir}/$(date +%s%N).${plugin}.$CNI_COMMAND.XXXX")`;
    const spy = `#!/bin/sh\n${save}\ncat > "$f"\nexec ${join(plugins, plugin)} < "$f"\n`;
    writeFileSync(join(binDir, plugin), spy, { mode: 0o755 });
  }
  const calls = (): PluginCall[] =>
    readdirSync(logDir)
      .sort()
      .map((f) => {
        const [, plugin = '', command = ''] = f.split('.');
        const stdin = JSON.parse(readFileSync(join(logDir, f), 'utf8')) as Record<string, unknown>;
        return { plugin, command, stdin };
      });
  return { binDir, calls };
}
