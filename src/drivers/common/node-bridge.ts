/**
 * The bridge a network keeps on the node (bridge and vxlan networks), its MAC pinned as the reference bridge plugin
 * pins it. A bridge whose MAC was never set takes the lowest MAC among its ports and changes it as pods come and go:
 * every pod that has the old one in its neighbour table loses its gateway until the entry expires.
 */
import { err, ok, type Result } from '../../cni/errors';
import type { KernelPort } from '../../kernel/kernel';
import type { BatchOp, LinkInfo } from '../../kernel/types';
import type { DriverContext, UndoStep } from '../driver';
import { kernelError } from './kernel-error';
import { definedFields } from '../../common/defined-fields';

/** Makes the bridge, up, or leaves the one of that name alone (EEXIST). */
export const createNodeBridge = (name: string, opts: { readonly mtu?: number } = {}): BatchOp => ({
  op: 'linkAdd',
  link: { kind: 'bridge', name, up: true, ...definedFields({ mtu: opts.mtu || undefined }) },
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

/** Which bridges a driver heals, by their ports (a vxlan network's bridge holds its VTEP; a bridge network's does not). */
export type BridgeOwner = (ports: readonly LinkInfo[]) => boolean;

/**
 * Pins, at the MAC it has now, every bridge of `owner`'s in `node` that holds a port the journal recorded (a host veth's
 * deleteLink step in that netns): a bridge an older plexusd made without pinning it, healed at daemon start before any
 * ADD. The MAC stays the one its pods know, so they see no change; from then on a pod that leaves takes nothing with it.
 * Answers the bridges pinned.
 */
export async function healBridgeMacs(
  kernel: KernelPort,
  node: string | undefined,
  steps: readonly UndoStep[],
  owner: BridgeOwner,
): Promise<Result<string[]>> {
  const recorded = new Set(steps.flatMap((s) => (s.kind === 'deleteLink' && s.netns === node ? [s.name] : [])));
  if (recorded.size === 0) return ok([]);
  const listed = await kernel.batch(node, [{ op: 'linkList' }]);
  if (!listed.ok) return err(kernelError(listed.error, 'listing the bridges to pin'));
  const [links] = listed.value;
  const portsOf = (bridge: LinkInfo): LinkInfo[] => links.filter((l) => l.masterIndex === bridge.index);
  const bridges = links.filter(
    (b) => b.kind === 'bridge' && portsOf(b).some((p) => recorded.has(p.name)) && owner(portsOf(b)),
  );
  const pins = bridges.flatMap(pinBridgeMac);
  if (pins.length === 0) return ok([]);
  const pinned = await kernel.batch(node, pins);
  if (!pinned.ok) return err(kernelError(pinned.error, `pinning the MAC of ${bridges.map((b) => b.name).join(', ')}`));
  return ok(bridges.map((b) => b.name));
}

/** A driver's start: heals its bridges from the journal (healBridgeMacs), logging what it pinned or why it could not. */
export async function healBridgesAtStart(
  ctx: DriverContext,
  node: string | undefined,
  owner: BridgeOwner,
): Promise<void> {
  const healed = await healBridgeMacs(ctx.kernel, node, await ctx.recordedSteps(), owner);
  if (!healed.ok)
    ctx.log.warn({ err: healed.error.message }, 'bridge MACs not pinned at start; the next ADD pins them');
  else if (healed.value.length) ctx.log.info({ bridges: healed.value }, 'bridge MACs pinned at the MACs they have');
}
