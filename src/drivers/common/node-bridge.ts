/**
 * The bridge a network keeps on the node (bridge and vxlan networks), its MAC pinned as the reference bridge plugin
 * pins it. A bridge whose MAC was never set takes the lowest MAC among its ports and changes it as pods come and go:
 * every pod that has the old one in its neighbour table loses its gateway until the entry expires.
 */
import type { BatchOp, LinkInfo } from '../../kernel/types';

/** Makes the bridge, up, or leaves the one of that name alone (EEXIST). */
export const createNodeBridge = (name: string, opts: { readonly mtu?: number } = {}): BatchOp => ({
  op: 'linkAdd',
  link: { kind: 'bridge', name, up: true, ...(opts.mtu ? { mtu: opts.mtu } : {}) },
  ignore: ['EEXIST'],
});

/**
 * Sets the bridge's MAC to `bridge.mac`: from then on it keeps it, whatever ports join or leave. Read before a port
 * joined, that is the MAC the kernel gave a new bridge; on a bridge that already has pods (one an older plexusd made)
 * it is the MAC they know, so setting it changes nothing they see. Run once a port has joined, as the reference pins
 * it: a bridge pinned while it has no port may keep the operational state UNKNOWN rather than UP (and one made with a
 * MAC has no carrier, nor an IPv6 link-local address, until a port forwards).
 */
export const pinBridgeMac = (bridge: LinkInfo): BatchOp[] =>
  bridge.mac ? [{ op: 'linkSet', name: bridge.name, mac: bridge.mac }] : [];
