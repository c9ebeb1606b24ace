/**
 * The gateway addresses an `isGateway` network puts on its bridge, as the reference plugin puts them: an address
 * already there is kept; any other IPv4 address met before it, or an IPv6 one whose subnet overlaps, is refused,
 * unless `forceAddress`, which removes it first.
 */
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import { type Cidr, contains, parseCidr } from '../../common/ip';
import type { AddrInfo, BatchOp } from '../../kernel/types';

export interface GatewayAddresses {
  readonly bridge: string;
  /** What the bridge has now, in the kernel's order. */
  readonly present: readonly AddrInfo[];
  /** The gateways, as `<gateway>/<prefix of the pod's subnet>`. */
  readonly wanted: readonly string[];
  readonly forceAddress: boolean;
}

/** The ops that put the gateways on the bridge (and with forceAddress take conflicting addresses off), or why not. */
export function gatewayAddressOps(g: GatewayAddresses): Result<BatchOp[]> {
  const ops: BatchOp[] = [];
  const onBridge = [...g.present];
  for (const gateway of g.wanted) {
    const wanted = parseCidr(gateway);
    if (!wanted) continue;
    const sameFamily = onBridge.filter((a) => a.family === wanted.family);
    const kept = sameFamily.findIndex((a) => sameAddress(a.address, wanted));
    // The reference walks the bridge's addresses in order and stops at the gateway: only those before it conflict.
    const before = kept < 0 ? sameFamily : sameFamily.slice(0, kept);
    for (const other of before.filter((a) => conflicts(a.address, gateway))) {
      if (!g.forceAddress) return err(otherAddress(g.bridge, other.address, gateway));
      ops.push({ op: 'addrDel', name: g.bridge, address: other.address });
      onBridge.splice(onBridge.indexOf(other), 1);
    }
    if (kept >= 0) continue;
    // With DAD, as the reference adds it.
    ops.push({ op: 'addrAdd', name: g.bridge, address: gateway, ignore: ['EEXIST'] });
    onBridge.push({ index: 0, family: wanted.family, address: gateway });
  }
  return ok(ops);
}

const sameAddress = (present: string, wanted: Cidr): boolean => {
  const a = parseCidr(present);
  return a !== undefined && a.value === wanted.value && a.prefix === wanted.prefix;
};

/** Another IPv4 address always conflicts (a bridge has one IPv4 gateway); an IPv6 one when the subnets overlap. */
function conflicts(present: string, gateway: string): boolean {
  const a = parseCidr(present);
  const b = parseCidr(gateway);
  if (!a || !b) return false;
  return a.family === 4 || contains(a, b) || contains(b, a);
}

const otherAddress = (bridge: string, present: string, gateway: string): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `bridge ${bridge} already has an IP address (${present}) different from the gateway ${gateway}`,
    'set "forceAddress": true to replace it, or give the network a bridge of its own ("bridge")',
  );
