/** The static plugin's semantics: the configured addresses plus requested ones; nothing is stored. */
import { type Result, err, ok } from '../cni/errors';
import { formatCidr, parseCidr } from '../common/ip';
import type { IpamResult } from './backend';
import type { DnsSpec, IpamConfig } from './config';
import { invalid } from './requested-ips';

type Static = Extract<IpamConfig, { type: 'static' }>;
type ResultIp = IpamResult['ips'][number];

export const withDns = (config: IpamConfig): { dns?: DnsSpec } => (config.dns !== undefined ? { dns: config.dns } : {});

/** As the static plugin: the configured addresses plus requested ones (which need a prefix); nothing is stored. */
export function allocateStatic(config: Static, requestedIps: readonly string[]): Result<IpamResult> {
  const ips: ResultIp[] = [...config.addresses];
  for (const text of requestedIps) {
    const cidr = parseCidr(text);
    if (cidr === undefined) {
      return err(
        invalid(
          `requested IP ${JSON.stringify(text)} must be an address with a prefix length (e.g. 10.10.0.1/24) for static IPAM`,
        ),
      );
    }
    const address = formatCidr(cidr.family, cidr.value, cidr.prefix);
    if (!ips.some((ip) => ip.address === address)) ips.push({ address });
  }
  if (ips.length === 0)
    return err(invalid('ipam.addresses: static IPAM needs at least one address (in ipam.addresses or requested)'));
  return ok({ ips, routes: config.routes, ...withDns(config) });
}
