/** The reference `ptp` plugin's config schema, validated up front. */
import { z } from 'zod';
import { type Result, err, ok } from '../../cni/errors';
import type { CniDns } from '../../cni/types';
import type { IpamConfig } from '../../ipam';
import type { PluginConfig } from '../../networks/nad';
import { invalidConfig, ipamField, mtuField, parseOptionalIpam, parsePluginConfig, notNative } from '../common/config';
import { definedFields } from '../../common/defined-fields';

const PtpSchema = z
  .object({
    ipMasq: z.boolean().default(false),
    mtu: mtuField,
    ipam: ipamField,
    dns: z
      .object({
        nameservers: z.array(z.string()).optional(),
        domain: z.string().optional(),
        search: z.array(z.string()).optional(),
        options: z.array(z.string()).optional(),
      })
      .optional(),
  })
  .passthrough();

export interface PtpConfig {
  readonly mtu?: number;
  readonly ipam: IpamConfig;
  /** Replaces the DNS of the IPAM result when it sets any field (as the reference plugin does). */
  readonly dns?: CniDns;
}

export function parsePtpConfig(plugin: PluginConfig): Result<PtpConfig> {
  const r = parsePluginConfig(PtpSchema, plugin);
  if (!r.ok) return r;
  const c = r.value;
  if (c.ipMasq) return err(notNative(plugin, 'ipMasq'));
  const ipam = parseOptionalIpam(plugin, c.ipam);
  if (!ipam.ok) return ipam;
  // A point-to-point link is routed through the gateway of each address: without IPAM there is nothing to route.
  if (!ipam.value) return err(invalidConfig(plugin, 'ipam: ptp needs an IPAM section that assigns addresses'));
  const dns = c.dns && (c.dns.nameservers || c.dns.domain || c.dns.search || c.dns.options) ? c.dns : undefined;
  return ok({ ...definedFields({ mtu: c.mtu || undefined }), ipam: ipam.value, ...definedFields({ dns }) });
}
