/**
 * The vxlan networks among the cluster's definitions, parsed, and which of them is each VNI's: the first, by
 * namespace/name, of the vxlan networks that use it (vniOwners). A network that uses another's VNI is refused (code 7).
 */
import { CniCode, CniError } from '../../cni/errors';
import type { NetworkDefinition } from '../../networks/nad';
import { parseVxlanConfig, type VxlanConfig } from './config';
import { vniOwners } from './peers';

export interface VxlanNetwork {
  readonly key: string;
  readonly conf: VxlanConfig;
}

/** The vxlan networks of `definitions` that parse, and each VNI's owner. */
export function vxlanNetworks(definitions: readonly NetworkDefinition[]): {
  networks: VxlanNetwork[];
  owners: Map<number, string>;
} {
  const networks: VxlanNetwork[] = [];
  for (const d of definitions) {
    const [only] = d.plugins;
    if (d.plugins.length !== 1 || only?.type !== 'vxlan') continue;
    const conf = parseVxlanConfig(only);
    if (conf.ok) networks.push({ key: d.key, conf: conf.value });
  }
  return { networks, owners: vniOwners(networks.map((n) => ({ key: n.key, vni: n.conf.vni }))) };
}

/** The cluster-mode networks that own their VNI: those whose flood entries a node keeps. */
export function clusterNetworks(definitions: readonly NetworkDefinition[]): VxlanNetwork[] {
  const { networks, owners } = vxlanNetworks(definitions);
  return networks.filter((n) => n.conf.cluster && owners.get(n.conf.vni) === n.key);
}

/** Code 7 when another network owns `vni`: two networks on one VNI would be one L2 segment. */
export function vniTaken(network: string, vni: number, owner: string | undefined): CniError | undefined {
  if (owner === undefined || owner === network) return undefined;
  return new CniError(
    CniCode.InvalidNetworkConfig,
    `network ${network} uses VNI ${vni}, which network ${owner} already uses: two networks on one VNI would be one segment`,
    `give network ${network} a "vni" of its own`,
  );
}
