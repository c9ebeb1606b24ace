/**
 * One CNI call of a plugin binary, exec'd as a runtime execs it (the reference plugins 1.9.1 of
 * test/support/plugin-dir.ts, for differential tests): its exit status and its answer.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

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
