/** The reference `bridge` plugin's config schema, validated up front. */
import { z } from 'zod';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { IpamConfig } from '../../ipam';
import type { PluginConfig } from '../../networks/nad';
import { checkLinkName, ipamField, mtuField, notNative, parseOptionalIpam, parsePluginConfig } from '../common';
import { definedFields } from '../../common/defined-fields';

const BridgeSchema = z.looseObject({
  bridge: z.string().default('cni0'),
  isGateway: z.boolean().default(false),
  isDefaultGateway: z.boolean().default(false),
  forceAddress: z.boolean().default(false),
  ipMasq: z.boolean().default(false),
  mtu: mtuField,
  hairpinMode: z.boolean().default(false),
  promiscMode: z.boolean().default(false),
  vlan: z.number().int().min(0).max(4094).default(0),
  vlanTrunk: z.array(z.unknown()).optional(),
  macspoofchk: z.boolean().default(false),
  portIsolation: z.boolean().default(false),
  enabledad: z.boolean().default(false),
  disableContainerInterface: z.boolean().default(false),
  ipam: ipamField,
});

export interface BridgeConfig {
  readonly bridge: string;
  /** isDefaultGateway implies isGateway, as in the reference plugin. */
  readonly isGateway: boolean;
  readonly isDefaultGateway: boolean;
  /** Replace another address on the bridge by the gateway rather than refuse the ADD (isGateway). */
  readonly forceAddress: boolean;
  readonly mtu?: number;
  readonly hairpinMode: boolean;
  readonly promiscMode: boolean;
  /** IPv6 duplicate address detection on the pod interface (off by default, as in the reference plugin). */
  readonly enabledad: boolean;
  /** Leave the pod interface down (an L2 port with no addresses). */
  readonly disableContainerInterface: boolean;
  readonly ipam?: IpamConfig;
}

export function parseBridgeConfig(plugin: PluginConfig): Result<BridgeConfig> {
  const parsed = parsePluginConfig(BridgeSchema, plugin);
  if (!parsed.ok) return parsed;
  const c = parsed.value;
  const name = checkLinkName(plugin, 'bridge', c.bridge);
  if (!name.ok) return name;
  const refused = notRunNatively(plugin, c);
  if (refused) return err(refused);
  if (c.hairpinMode && c.promiscMode) {
    return err(
      new CniError(
        CniCode.InvalidNetworkConfig,
        `network ${plugin.name}: hairpinMode and promiscMode cannot be set at the same time`,
        'set one of them to false (the reference bridge plugin refuses both as well)',
      ),
    );
  }
  const ipam = parseOptionalIpam(plugin, c.ipam);
  if (!ipam.ok) return ipam;
  if (ipam.value && c.disableContainerInterface) {
    return err(
      new CniError(
        CniCode.InvalidNetworkConfig,
        `network ${plugin.name}: disableContainerInterface leaves the pod interface down, so it cannot have IPAM`,
        'remove "ipam", or set "disableContainerInterface": false (the reference bridge plugin refuses both as well)',
      ),
    );
  }
  return ok({
    bridge: c.bridge,
    isGateway: c.isGateway || c.isDefaultGateway,
    isDefaultGateway: c.isDefaultGateway,
    forceAddress: c.forceAddress,
    ...definedFields({ mtu: c.mtu || undefined }),
    hairpinMode: c.hairpinMode,
    promiscMode: c.promiscMode,
    enabledad: c.enabledad,
    disableContainerInterface: c.disableContainerInterface,
    ...definedFields({ ipam: ipam.value }),
  });
}

/** The first option set that the native driver does not run (the reference plugin does, through delegation). */
function notRunNatively(plugin: PluginConfig, c: z.output<typeof BridgeSchema>): CniError | undefined {
  if (c.ipMasq) return notNative(plugin, 'ipMasq');
  if (c.vlan !== 0) return notNative(plugin, 'vlan');
  if (c.vlanTrunk !== undefined) return notNative(plugin, 'vlanTrunk');
  if (c.macspoofchk) return notNative(plugin, 'macspoofchk');
  if (c.portIsolation) return notNative(plugin, 'portIsolation');
  return undefined;
}
