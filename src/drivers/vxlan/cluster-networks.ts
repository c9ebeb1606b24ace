/**
 * The vxlan networks among the cluster's definitions, parsed, and which of them is refused for using a VNI another one
 * already uses (the rule of src/networks/exclusive-claims.ts: the older definition keeps it). A source of definitions
 * from the API refuses those when it reads them (vniClaims); the driver checks again on ADD (code 7) for the others.
 */
import { claimClashes, type ClaimClash, type ClaimsOf, type ExclusiveClaim } from '../../networks/exclusive-claims';
import type { NetworkDefinition } from '../../networks/nad';
import { parseVxlanConfig, type VxlanConfig } from './config';

export interface VxlanNetwork {
  readonly key: string;
  readonly conf: VxlanConfig;
}

/** The VNI a vxlan network holds: two networks on one VNI would be one L2 segment (and share the VTEP `vx<vni>`). */
export const vniClaim = (vni: number): ExclusiveClaim => ({
  resource: `VXLAN VNI ${vni}`,
  why: 'two networks on one VNI would be one segment',
  fix: 'give one of them a "vni" of its own',
});

/** What a definition claims: its VNI when it is a vxlan network that parses. */
export const vniClaims: ClaimsOf = (definition) => {
  const conf = vxlanConfigOf(definition);
  return conf ? [vniClaim(conf.vni)] : [];
};

/** The vxlan networks of `definitions` that parse, and those of them refused for another's VNI. */
export function vxlanNetworks(definitions: readonly NetworkDefinition[]): {
  networks: VxlanNetwork[];
  clashes: Map<string, ClaimClash>;
} {
  const networks: VxlanNetwork[] = [];
  for (const d of definitions) {
    const conf = vxlanConfigOf(d);
    if (conf) networks.push({ key: d.key, conf });
  }
  const clashes = claimClashes(networks.map((n) => ({ key: n.key, claims: [vniClaim(n.conf.vni)] })));
  return { networks, clashes };
}

/** The cluster-mode networks that hold their VNI: those whose flood entries a node keeps. */
export function clusterNetworks(definitions: readonly NetworkDefinition[]): VxlanNetwork[] {
  const { networks, clashes } = vxlanNetworks(definitions);
  return networks.filter((n) => n.conf.cluster && !clashes.has(n.key));
}

function vxlanConfigOf(d: NetworkDefinition): VxlanConfig | undefined {
  const [only] = d.plugins;
  if (d.plugins.length !== 1 || only?.type !== 'vxlan') return undefined;
  const conf = parseVxlanConfig(only);
  return conf.ok ? conf.value : undefined;
}
