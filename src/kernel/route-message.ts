/** What RTM_NEWROUTE and RTM_DELROUTE carry for a route, and what RTM_NEWROUTE replies say of one. */
import * as C from './constants';
import { invalidRequest } from './failure';
import { formatAddress, parseAddress } from './ip';
import { type Attr, attrBytes, attrU32, parseAttrs, rtmsg } from './message';
import type { RouteInfo, RouteSpec } from './types';

/**
 * The header and attributes of a route request. A delete matches on what it names: protocol and scope are left
 * open, so it also finds the kernel's own routes.
 */
export function routeMessage(
  route: RouteSpec,
  indexOf: (name: string) => number,
  forDelete = false,
): { header: Buffer; attrs: Attr[] } {
  const dst = parseAddress(route.dst);
  const attrs: Attr[] = [attrU32(C.RTA_TABLE, C.RT_TABLE_MAIN)];
  if (dst.prefixLen > 0) attrs.push(attrBytes(C.RTA_DST, dst.bytes));
  if (route.gw) {
    const gw = parseAddress(route.gw);
    if (gw.family !== dst.family) throw familiesDiffer(`${route.dst} via ${route.gw}`, 'gateway');
    attrs.push(attrBytes(C.RTA_GATEWAY, gw.bytes));
  }
  if (route.dev) attrs.push(attrU32(C.RTA_OIF, indexOf(route.dev)));
  if (route.metric !== undefined) attrs.push(attrU32(C.RTA_PRIORITY, route.metric));
  if (route.src) {
    const src = parseAddress(route.src);
    if (src.family !== dst.family) throw familiesDiffer(`${route.dst} src ${route.src}`, 'source');
    attrs.push(attrBytes(C.RTA_PREFSRC, src.bytes));
  }
  const header = rtmsg({
    family: dst.family,
    dstLen: dst.prefixLen,
    table: C.RT_TABLE_MAIN,
    protocol: forDelete ? 0 : C.RTPROT_BOOT,
    scope: forDelete ? C.RT_SCOPE_NOWHERE : routeScope(route),
    type: C.RTN_UNICAST,
  });
  return { header, attrs };
}

const familiesDiffer = (target: string, what: 'gateway' | 'source') =>
  invalidRequest('route', target, `${what} and destination are of different IP families`);

function routeScope(route: RouteSpec): number {
  if (route.scope === 'host') return C.RT_SCOPE_HOST;
  return route.scope === 'link' || !route.gw ? C.RT_SCOPE_LINK : C.RT_SCOPE_UNIVERSE;
}

export const describeRoute = (r: RouteSpec): string => {
  const via = r.gw ? ` via ${r.gw}` : '';
  const dev = r.dev ? ` dev ${r.dev}` : '';
  return `${r.dst}${via}${dev}`;
};

/** The header of a route dump, of one family or both. */
export function routeDumpHeader(family?: 4 | 6): Buffer {
  const fam = family === 4 ? C.AF_INET : family === 6 ? C.AF_INET6 : C.AF_UNSPEC;
  return rtmsg({ family: fam, dstLen: 0, table: 0, protocol: 0, scope: 0, type: 0 });
}

/** An RTM_NEWROUTE reply's payload as a RouteInfo. */
export function parseRoute(payload: Buffer): RouteInfo {
  const f = payload.readUInt8(0);
  const dstLen = payload.readUInt8(1);
  const attrs = parseAttrs(payload.subarray(12));
  const tableAttr = attrs.get(C.RTA_TABLE);
  const dstBytes = attrs.get(C.RTA_DST);
  const dst = dstBytes ? formatAddress(dstBytes) : f === C.AF_INET ? '0.0.0.0' : '::';
  const gw = attrs.get(C.RTA_GATEWAY);
  const oif = attrs.get(C.RTA_OIF);
  const route: { -readonly [K in keyof RouteInfo]: RouteInfo[K] } = {
    family: f === C.AF_INET ? 4 : 6,
    dst: `${dst}/${dstLen}`,
    table: tableAttr ? tableAttr.readUInt32LE(0) : payload.readUInt8(4),
    protocol: payload.readUInt8(5),
    scope: payload.readUInt8(6),
  };
  if (gw) route.gw = formatAddress(gw);
  if (oif) route.oifIndex = oif.readUInt32LE(0);
  return route;
}
