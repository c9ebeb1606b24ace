/**
 * What the reference bridge plugin sets besides links and addresses, done the same way: the pod interface's sysctls
 * (ARP notify, IPv6 DAD, IPv6 enabled where it gets an IPv6 address), the bridge's (it owns its routes: no router
 * advertisements), IP forwarding for the gateway's families, and the routes its result reports.
 */
import type { CniRoute } from '../../cni/types';
import type { IpamResult } from '../../ipam';
import type { BatchOp } from '../../kernel/types';
import { podRoutes } from '../common';
import { ipamRoutes, ipv6EnableSysctls, tolerantSysctl } from '../common/pod-sysctls';
import type { BridgeConfig } from './config';

const sysctl = tolerantSysctl;

/** The pod interface's sysctls, set before it is up and given its addresses. */
export function podSysctls(conf: BridgeConfig, ifname: string, ipam: IpamResult | undefined): BatchOp[] {
  if (!ipam) return [];
  return [
    ...(conf.enabledad
      ? [sysctl(`net/ipv6/conf/${ifname}/enhanced_dad`, '1'), sysctl(`net/ipv6/conf/${ifname}/accept_dad`, '1')]
      : [sysctl(`net/ipv6/conf/${ifname}/accept_dad`, '0')]),
    sysctl(`net/ipv4/conf/${ifname}/arp_notify`, '1'),
    ...ipv6EnableSysctls(ifname, ipam),
  ];
}

/** The bridge's sysctls when it is ensured: no router advertisements, forwarding for each gateway's family. */
export function bridgeSysctls(bridge: string, gateways: readonly string[]): BatchOp[] {
  const families = new Set(gateways.map((g) => (g.includes(':') ? 6 : 4)));
  return [
    sysctl(`net/ipv6/conf/${bridge}/accept_ra`, '0'),
    ...(families.has(4) ? [sysctl('net/ipv4/ip_forward', '1')] : []),
    ...(families.has(6) ? [sysctl('net/ipv6/conf/all/forwarding', '1')] : []),
  ];
}

/**
 * The routes the result reports: IPAM's as IPAM gave them (a route without a gateway stays without one, though the
 * pod's route goes via the family's gateway), then with isDefaultGateway a default route per family via its gateway,
 * unless IPAM gave that family a default route with a gateway.
 */
export function reportedRoutes(conf: BridgeConfig, ipam: IpamResult | undefined): CniRoute[] {
  const fromIpam: CniRoute[] = ipamRoutes(ipam);
  if (!conf.isDefaultGateway) return fromIpam;
  const hasDefault = (dst: string): boolean => fromIpam.some((r) => r.dst === dst && r.gw);
  const defaults = podRoutes(ipam, { defaultGateway: true }).filter(
    (r) => (r.dst === '0.0.0.0/0' || r.dst === '::/0') && r.gw && !hasDefault(r.dst),
  );
  return [...fromIpam, ...defaults];
}
