/**
 * Config of the Plexus `vxlan` plugin type (no reference plugin has one): an L2 overlay network. Each node has one
 * bridge per network and one VXLAN device (VTEP) enslaved to it, flooding unknown traffic to the listed remote
 * VTEPs and learning where MACs live; pods attach to the bridge as with the bridge driver. See docs/drivers.md.
 */
import { z } from 'zod';
import { type Result, err, ok } from '../../cni/errors';
import type { IpamConfig } from '../../ipam';
import type { PluginConfig } from '../../networks/nad';
import {
  checkLinkName,
  invalidConfig,
  ipamField,
  ipFamily,
  ipField,
  mtuField,
  parseOptionalIpam,
  parsePluginConfig,
} from '../common';
import { definedFields } from '../../common/defined-fields';

const VxlanSchema = z.looseObject({
  vni: z.number().int().min(1).max(16777215),
  port: z.number().int().min(1).max(65535).default(4789),
  local: ipField.optional(),
  underlayInterface: z.string().optional(),
  // Left out, or "cluster": each node's plexusd finds the other VTEPs of the network itself (cluster mode).
  remotes: z.union([z.array(ipField), z.literal('cluster')]).default('cluster'),
  bridge: z.string().optional(),
  mtu: mtuField,
  learning: z.boolean().default(true),
  ipam: ipamField,
});

export interface VxlanConfig {
  readonly vni: number;
  readonly port: number;
  readonly local?: string;
  readonly underlayInterface?: string;
  /** The other nodes' VTEPs, as listed; empty in cluster mode, where the node's flood entries follow its peers. */
  readonly remotes: readonly string[];
  /** Cluster mode: `remotes` left out or "cluster" (flood-entries.ts keeps the entries, underlay.ts finds `local`). */
  readonly cluster: boolean;
  /** The per-network bridge on the node; default `vxbr<vni>`. */
  readonly bridge: string;
  /** The VTEP's name on the node: `vx<vni>`. */
  readonly device: string;
  /** Pod and VTEP MTU; default: what the kernel gives the VTEP (underlay MTU - 50 with an underlay interface). */
  readonly mtu?: number;
  readonly learning: boolean;
  readonly ipam?: IpamConfig;
}

export const vtepName = (vni: number): string => `vx${vni}`;

export function parseVxlanConfig(plugin: PluginConfig): Result<VxlanConfig> {
  const parsed = parsePluginConfig(VxlanSchema, plugin);
  if (!parsed.ok) return parsed;
  const c = parsed.value;
  const remotes: readonly string[] = c.remotes === 'cluster' ? [] : c.remotes;
  const cluster = c.remotes === 'cluster';
  const bridge = c.bridge ?? `vxbr${c.vni}`;
  const bridgeName = checkLinkName(plugin, 'bridge', bridge);
  if (!bridgeName.ok) return bridgeName;
  if (c.underlayInterface !== undefined) {
    const name = checkLinkName(plugin, 'underlayInterface', c.underlayInterface);
    if (!name.ok) return name;
  }
  // One VTEP speaks one IP family: its local address and every remote must agree.
  const family = c.local ? ipFamily(c.local) : remotes[0] ? ipFamily(remotes[0]) : undefined;
  for (const [i, remote] of remotes.entries()) {
    if (ipFamily(remote) !== family)
      return err(
        invalidConfig(
          plugin,
          `remotes[${i}]: ${remote} is not of the same IP family as ${c.local ? `local ${c.local}` : `remotes[0]`}`,
        ),
      );
  }
  if (c.local && remotes.includes(c.local))
    return err(invalidConfig(plugin, `remotes: contains the local address ${c.local}`));
  const ipam = parseOptionalIpam(plugin, c.ipam);
  if (!ipam.ok) return ipam;
  return ok({
    vni: c.vni,
    port: c.port,
    remotes,
    cluster,
    bridge,
    device: vtepName(c.vni),
    learning: c.learning,
    ...definedFields({
      local: c.local || undefined,
      underlayInterface: c.underlayInterface || undefined,
      mtu: c.mtu || undefined,
      ipam: ipam.value,
    }),
  });
}
