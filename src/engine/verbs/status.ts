/** STATUS: ready when the daemon is, and when the default network's driver (its delegated plugins, if any) says so. */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import type { CniRequest } from '../../cni/request';
import { chooseDefaultNetwork } from '../../networks/default-network';
import { delegationForced } from '../../networks/planner';
import type { EngineContext } from '../context';
import { configuredDefaultNetwork } from '../plan';

type StatusRequest = Extract<CniRequest, { command: 'STATUS' }>;

export async function status(ctx: EngineContext, req: StatusRequest): Promise<Result<void>> {
  const configured = configuredDefaultNetwork(req, ctx.settings);
  if (!configured) return ok(undefined);
  const chosen = { configured, annotations: {}, podNamespace: 'default', networks: ctx.networks, isolation: {} };
  const network = chooseDefaultNetwork(chosen);
  if (!network.ok) {
    const why = `the default network is not usable: ${network.error.message}`;
    return err(new CniError(CniCode.PluginNotAvailable, why));
  }
  const driver = ctx.drivers.for(network.value, delegationForced(network.value));
  return driver.status ? driver.status(network.value, ctx.settings.cniBinDir) : ok(undefined);
}
