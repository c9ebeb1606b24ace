/**
 * The bridge a network keeps on the node (bridge and vxlan networks), made with its MAC pinned. A bridge whose MAC
 * was never set takes the lowest MAC among its ports and changes it as pods come and go: every pod that had the old
 * one in its neighbour table loses its gateway until the entry expires (the reference bridge plugin pins it too).
 */
import type { BatchOp, LinkInfo } from '../../kernel/types';
import { randomMac } from './host-veth';

export interface NodeBridge {
  /** The MAC the bridge is made with: a MAC that was set stays, whatever ports join or leave. */
  readonly mac: string;
  /** Makes the bridge, up, or leaves the one of that name alone (EEXIST). */
  readonly create: BatchOp;
}

export function nodeBridge(name: string, opts: { readonly mtu?: number } = {}): NodeBridge {
  const mac = randomMac();
  return {
    mac,
    create: {
      op: 'linkAdd',
      link: { kind: 'bridge', name, mac, up: true, ...(opts.mtu ? { mtu: opts.mtu } : {}) },
      ignore: ['EEXIST'],
    },
  };
}

/**
 * Pins the MAC of a bridge that already existed (one an older plexusd made, whose MAC follows its ports) at the MAC
 * it has now: setting the address it already has changes nothing its pods see, and it stops following its ports.
 * None when the bridge is the one just made with `made.mac`.
 */
export const pinBridgeMac = (bridge: LinkInfo, made: NodeBridge): BatchOp[] =>
  bridge.mac && bridge.mac !== made.mac ? [{ op: 'linkSet', name: bridge.name, mac: bridge.mac }] : [];
