/**
 * A runtime's CNI plugin directory, as the tests' nodes and daemons are given one: Debian's reference plugins linked
 * in (the node's own networks and delegation run them), and the project's shim when the node runs Plexus.
 */
import { copyFileSync, mkdirSync, readdirSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { SHIM } from './daemon';

/** Debian's containernetworking-plugins. */
export const REFERENCE_PLUGINS = '/usr/lib/cni';

/** Makes `binDir` (and its parents) with every reference plugin linked in; returns it. */
export function referencePluginDir(binDir: string, referencePlugins = REFERENCE_PLUGINS): string {
  mkdirSync(binDir, { recursive: true });
  for (const f of readdirSync(referencePlugins)) symlinkSync(join(referencePlugins, f), join(binDir, f));
  return binDir;
}

/** Makes `binDir` with the reference plugins and a copy of bin/plexus-cni, as a Plexus node's runtime has; returns it. */
export function plexusPluginDir(binDir: string): string {
  referencePluginDir(binDir);
  copyFileSync(SHIM, join(binDir, 'plexus-cni'));
  return binDir;
}
