/**
 * Sysctls the reference plugins write on a pod interface (interface names may hold dots, so the keys use slashes).
 * The reference ignores their failures (IPv6 compiled out), and so do these.
 */
import type { IpamResult } from '../../ipam';
import type { BatchOp } from '../../kernel/types';
import { definedFields } from '../../common/defined-fields';

export const tolerantSysctl = (key: string, value: string): BatchOp => ({
  op: 'sysctlWrite',
  key,
  value,
  ignore: ['ENOENT'],
});

/** What ipam.ConfigureIface does before an IPv6 address: IPv6 enabled on lo and the interface, addresses kept down. */
export function ipv6EnableSysctls(ifname: string, ipam: IpamResult | undefined): BatchOp[] {
  if (!ipam?.ips.some((ip) => ip.address.includes(':'))) return [];
  return [
    tolerantSysctl('net/ipv6/conf/lo/disable_ipv6', '0'),
    tolerantSysctl(`net/ipv6/conf/${ifname}/disable_ipv6`, '0'),
    tolerantSysctl(`net/ipv6/conf/${ifname}/keep_addr_on_down`, '1'),
  ];
}

/** The reference macvlan's and ipvlan's: announce the interface's addresses (ARP and NDISC) when it comes up. */
export const notifySysctls = (ifname: string): BatchOp[] => [
  tolerantSysctl(`net/ipv4/conf/${ifname}/arp_notify`, '1'),
  tolerantSysctl(`net/ipv6/conf/${ifname}/ndisc_notify`, '1'),
];

/** IPAM's routes as IPAM gave them, as the reference plugins report them (the pod's routes get the gateways). */
export const ipamRoutes = (ipam: IpamResult | undefined): { dst: string; gw?: string }[] =>
  (ipam?.routes ?? []).map((r) => ({ dst: r.dst, ...definedFields({ gw: r.gw || undefined }) }));
