/** The reference `bridge` plugin's config schema, validated up front. */
import { firstIssue } from '../../common/schema-issues';
import { z } from 'zod';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import { validateIfname } from '../../cni/request';
import { type IpamConfig, parseIpamConfig } from '../../ipam';
import type { PluginConfig } from '../../networks/nad';

const BridgeSchema = z
  .object({
    bridge: z.string().default('cni0'),
    isGateway: z.boolean().default(false),
    isDefaultGateway: z.boolean().default(false),
    forceAddress: z.boolean().default(false),
    ipMasq: z.boolean().default(false),
    mtu: z.number().int().min(68).max(65535).optional(),
    hairpinMode: z.boolean().default(false),
    promiscMode: z.boolean().default(false),
    vlan: z.number().int().min(0).max(4094).default(0),
    ipam: z.record(z.string(), z.unknown()).optional(),
  })
  .passthrough();

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
  readonly ipam?: IpamConfig;
}

export function parseBridgeConfig(plugin: PluginConfig): Result<BridgeConfig> {
  const r = BridgeSchema.safeParse(plugin);
  if (!r.success) {
    return err(
      new CniError(
        CniCode.InvalidNetworkConfig,
        `bridge config of network ${plugin.name}: ${firstIssue(r.error, '(config)')}`,
      ),
    );
  }
  const c = r.data;
  const name = validateIfname(c.bridge, 'bridge');
  if (!name.ok) return err(new CniError(CniCode.InvalidNetworkConfig, `network ${plugin.name}: ${name.error.message}`));
  if (c.ipMasq) {
    return err(
      new CniError(
        CniCode.UnsupportedField,
        `network ${plugin.name}: ipMasq is not implemented by the native bridge driver yet`,
        'set "ipMasq": false, or masquerade on the node; see docs/configuration.md',
      ),
    );
  }
  if (c.hairpinMode && c.promiscMode) {
    return err(
      new CniError(
        CniCode.InvalidNetworkConfig,
        `network ${plugin.name}: hairpinMode and promiscMode cannot be set at the same time`,
        'set one of them to false (the reference bridge plugin refuses both as well)',
      ),
    );
  }
  if (c.vlan !== 0) {
    return err(
      new CniError(
        CniCode.UnsupportedField,
        `network ${plugin.name}: vlan ${c.vlan} is not implemented by the native bridge driver yet`,
        'remove "vlan" or set it to 0; see docs/configuration.md',
      ),
    );
  }
  let ipam: IpamConfig | undefined;
  if (c.ipam && Object.keys(c.ipam).length > 0) {
    const parsed = parseIpamConfig(c.ipam);
    if (!parsed.ok) return err(parsed.error.withContext(`network ${plugin.name}`));
    ipam = parsed.value;
  }
  return ok({
    bridge: c.bridge,
    isGateway: c.isGateway || c.isDefaultGateway,
    isDefaultGateway: c.isDefaultGateway,
    forceAddress: c.forceAddress,
    ...(c.mtu ? { mtu: c.mtu } : {}),
    hairpinMode: c.hairpinMode,
    promiscMode: c.promiscMode,
    ...(ipam ? { ipam } : {}),
  });
}
