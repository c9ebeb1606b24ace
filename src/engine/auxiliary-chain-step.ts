/**
 * The auxiliary chain's attachment (Multus's auxiliaryCNIChainName), planned after every pod's networks: under
 * `net<position>` (the next free one), delegated, its first plugin given passthru's empty result.
 */
import { type Result, err, ok } from '../cni/errors';
import type { CniVersion } from '../cni/version';
import type { AttachRequest } from '../drivers/driver';
import type { DriverRegistry } from '../drivers/registry';
import { auxiliaryChainNetwork } from '../networks/auxiliary-chain';
import type { PlannedAttachment } from '../networks/planner';
import type { AttachmentStep } from './attachment-step';

export interface AuxiliaryChainPlan {
  /** The directory whose `.conf` files make the chain. */
  readonly chainDir: string;
  readonly version: CniVersion;
  /** The pod's attachments planned before it, whose names it must not take. */
  readonly before: readonly AttachmentStep[];
  readonly drivers: DriverRegistry;
  /** The request of a secondary attachment of this pod (plan.ts builds it for every secondary network). */
  readonly requestFor: (planned: PlannedAttachment) => Result<AttachRequest>;
}

/** The chain's step, last, as Multus appends its delegate; none when its directory has no plugin. */
export function auxiliaryChainStep(plan: AuxiliaryChainPlan): Result<AttachmentStep | undefined> {
  const { chainDir, before, drivers } = plan;
  const network = auxiliaryChainNetwork(chainDir, plan.version);
  if (!network.ok) return network;
  if (!network.value) return ok(undefined);
  const taken = new Set(before.map((s) => s.planned.ifname));
  let n = before.length;
  while (taken.has(`net${n}`)) n++;
  const planned: PlannedAttachment = {
    ifname: `net${n}`,
    explicitName: false,
    network: network.value,
    isDefault: false,
    forceDelegate: true,
    defaultRoute: false,
  };
  const config = drivers.delegate.parse(network.value.plugins);
  if (!config.ok) return err(config.error.withContext(`the auxiliary chain ${chainDir}`));
  const request = plan.requestFor(planned);
  if (!request.ok) return request;
  const options = { ...request.value.options, chainPrevResult: { interfaces: [], ips: [], routes: [] } };
  return ok({ planned, driver: drivers.delegate, config: config.value, request: { ...request.value, options } });
}
