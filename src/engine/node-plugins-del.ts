/**
 * A DEL of a sandbox Plexus has no record of, when the default network is the node's own CNI config file: that
 * network's plugins get the DEL (last plugin first), as the runtime would have sent it before Plexus was installed.
 * Their DEL of something they do not have succeeds (CNI spec), so a sandbox that was never theirs costs one exec.
 * A sandbox Plexus had and removed (its undo already ran the plugins' DEL) never gets here: del.ts answers it first.
 */
import { err, ok, type Result } from '../cni/errors';
import type { CniRequest } from '../cni/request';
import { chooseDefaultNetwork } from '../networks/default-network';
import type { EngineContext } from './context';
import { configuredDefaultNetwork } from './plan';

type DelRequest = Extract<CniRequest, { command: 'ADD' | 'CHECK' | 'DEL' }>;

const notForwarded = "DEL of an unknown sandbox not forwarded: the node's network config cannot be read";

export async function forwardUnknownDel(ctx: EngineContext, req: DelRequest): Promise<Result<void>> {
  const configured = configuredDefaultNetwork(req, ctx.settings);
  if (!configured?.startsWith('/')) return ok(undefined);
  const podNamespace = req.args.podNamespace ?? 'default';
  const chosen = { configured, annotations: {}, podNamespace, networks: ctx.networks, isolation: {} };
  const network = chooseDefaultNetwork(chosen);
  if (!network.ok) {
    ctx.log.warn({ containerId: req.containerId, err: network.error.message }, notForwarded);
    return ok(undefined);
  }
  const args = req.args.raw.map(([k, v]) => `${k}=${v}`).join(';');
  const env = {
    containerId: req.containerId,
    netns: req.netns,
    ifname: req.ifname,
    args,
    path: ctx.settings.cniBinDir,
  };
  for (const plugin of [...network.value.plugins].reverse()) {
    const step = ctx.drivers.delegateDel({ plugin: plugin.type, config: JSON.stringify(plugin), env });
    const r = await ctx.drivers.undo(step, { kernel: ctx.kernel, ipam: ctx.ipam });
    if (!r.ok) {
      const what = `DEL of ${req.containerId}/${req.ifname}, which Plexus did not attach`;
      return err(r.error.withContext(`${what}, forwarded to the node's network ${network.value.key} (${configured})`));
    }
  }
  return ok(undefined);
}
