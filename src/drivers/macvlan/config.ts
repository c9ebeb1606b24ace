/** The reference `macvlan` plugin's config schema, validated up front. */
import { z } from 'zod';
import { Result, err, ok } from '../../cni/errors';
import type { IpamConfig } from '../../ipam';
import type { MacvlanMode } from '../../kernel/types';
import type { PluginConfig } from '../../networks/nad';
import { checkLinkName, ipamField, mtuField, parseOptionalIpam, parsePluginConfig, unsupportedField } from '../common';

const MacvlanSchema = z.looseObject({
  master: z.string().optional(),
  mode: z.enum(['bridge', 'private', 'vepa', 'passthru', 'source']).default('bridge'),
  mtu: mtuField,
  linkInContainer: z.boolean().default(false),
  ipam: ipamField,
});

export interface MacvlanConfig {
  /** Undefined: the interface of the host's default route, as in the reference plugin. */
  readonly master?: string;
  readonly mode: MacvlanMode;
  readonly mtu?: number;
  readonly ipam?: IpamConfig;
}

export function parseMacvlanConfig(plugin: PluginConfig): Result<MacvlanConfig> {
  const parsed = parsePluginConfig(MacvlanSchema, plugin);
  if (!parsed.ok) return parsed;
  const c = parsed.value;
  if (c.linkInContainer) {
    return err(unsupportedField(plugin, 'linkInContainer: a master inside the pod netns is not supported natively', 'set "linkInContainer": false, or run the reference plugin through the delegate driver'));
  }
  if (c.master !== undefined) {
    const name = checkLinkName(plugin, 'master', c.master);
    if (!name.ok) return name;
  }
  const ipam = parseOptionalIpam(plugin, c.ipam);
  if (!ipam.ok) return ipam;
  return ok({ ...(c.master ? { master: c.master } : {}), mode: c.mode, ...(c.mtu ? { mtu: c.mtu } : {}), ...(ipam.value ? { ipam: ipam.value } : {}) });
}
