/**
 * The reference plugins 1.9.1 (../shared/cni/plugins-1.9.1.tar.xz, what users compare Plexus against), unpacked
 * into a directory of the test file's own before its tests and removed after them; and one CNI call of a plugin.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before } from 'node:test';
import { ROOT } from './daemon';

export const REFERENCE_191_TARBALL = resolve(ROOT, '../shared/cni/plugins-1.9.1.tar.xz');

/** Why the plugins cannot be had here, or undefined. */
export const reference191Missing = (): string | undefined =>
  existsSync(REFERENCE_191_TARBALL) ? undefined : `the reference plugins 1.9.1 at ${REFERENCE_191_TARBALL}`;

/** The directory the plugins are unpacked into, valid from the file's before() hook to its after() hook. */
export function reference191Dir(): () => string {
  let dir = '';
  before(() => {
    if (reference191Missing()) return;
    dir = mkdtempSync(join(tmpdir(), 'plexus-ref191-'));
    execFileSync('tar', ['-xJf', REFERENCE_191_TARBALL, '-C', dir]);
  });
  after(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  return () => {
    if (!dir) throw new Error('the reference plugins are used before their before() hook ran');
    return dir;
  };
}

export interface PluginCall {
  readonly dir: string;
  readonly command: 'ADD' | 'DEL' | 'CHECK';
  readonly config: Record<string, unknown>;
  readonly containerId: string;
  readonly netns: string;
  readonly ifname: string;
  /** The netns (a name under /var/run/netns) the plugin runs in: the node it stands for. */
  readonly node?: string;
  readonly cniArgs?: string;
}

/** Runs one CNI call of `config.type`: its exit status and its stdout parsed (a result or an error). */
export function callPlugin(call: PluginCall): { status: number | null; answer: Record<string, unknown> } {
  const plugin = join(call.dir, String(call.config.type));
  const argv = call.node ? ['ip', 'netns', 'exec', call.node, plugin] : [plugin];
  const r = spawnSync(argv[0]!, argv.slice(1), {
    input: JSON.stringify(call.config),
    encoding: 'utf8',
    env: {
      PATH: process.env.PATH,
      CNI_COMMAND: call.command,
      CNI_CONTAINERID: call.containerId,
      CNI_NETNS: call.netns,
      CNI_IFNAME: call.ifname,
      CNI_PATH: call.dir,
      ...(call.cniArgs ? { CNI_ARGS: call.cniArgs } : {}),
    },
  });
  const out = r.stdout.trim();
  return { status: r.status, answer: out ? (JSON.parse(out) as Record<string, unknown>) : { stderr: r.stderr } };
}
