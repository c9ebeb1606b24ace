/** The reference `tap` plugin's config schema, validated up front. */
import { z } from 'zod';
import { type Result, err, ok } from '../../cni/errors';
import type { IpamConfig } from '../../ipam';
import type { PluginConfig } from '../../networks/nad';
import {
  checkLinkName,
  ipamField,
  macField,
  mtuField,
  notNative,
  parseOptionalIpam,
  parsePluginConfig,
} from '../common';
import { definedFields } from '../../common/defined-fields';

const id = z.number().int().min(0).max(0xfffffffe);
const TapSchema = z.looseObject({
  mac: macField.optional(),
  mtu: mtuField,
  multiQueue: z.boolean().default(false),
  owner: id.optional(),
  group: id.optional(),
  /** The reference runs `ip tuntap` under this SELinux context; Plexus creates taps over ioctls, so it refuses it. */
  selinuxContext: z.string().optional(),
  bridge: z.string().optional(),
  ipam: ipamField,
});

export interface TapConfig {
  readonly mac?: string;
  readonly mtu?: number;
  readonly multiQueue: boolean;
  readonly owner?: number;
  readonly group?: number;
  /** A bridge inside the pod netns (e.g. made by an earlier plugin of the chain) to enslave the tap to. */
  readonly bridge?: string;
  readonly ipam?: IpamConfig;
}

export function parseTapConfig(plugin: PluginConfig): Result<TapConfig> {
  const parsed = parsePluginConfig(TapSchema, plugin);
  if (!parsed.ok) return parsed;
  const c = parsed.value;
  if (c.selinuxContext) return err(notNative(plugin, 'selinuxContext'));
  if (c.bridge !== undefined) {
    const name = checkLinkName(plugin, 'bridge', c.bridge);
    if (!name.ok) return name;
  }
  const ipam = parseOptionalIpam(plugin, c.ipam);
  if (!ipam.ok) return ipam;
  return ok({
    ...(c.mac ? { mac: c.mac.toLowerCase() } : {}),
    ...definedFields({ mtu: c.mtu || undefined }),
    multiQueue: c.multiQueue,
    ...definedFields({ owner: c.owner, group: c.group, bridge: c.bridge || undefined, ipam: ipam.value }),
  });
}
