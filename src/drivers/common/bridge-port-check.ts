/**
 * CHECK of a pod's port on a node bridge (bridge and vxlan networks), on the node's side, as the reference bridge
 * plugin checks it: the bridge in the result is still a bridge with the result's MAC, and the host veth still has its
 * MAC and is still on that bridge. The pod's side (its interface, MAC, addresses, routes) the engine checks for every
 * driver (engine/verbs/check.ts).
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import type { KernelPort } from '../../kernel/kernel';
import type { RecordedAttachment } from '../driver';
import { kernelError } from './kernel-error';

export async function checkBridgePort(
  kernel: KernelPort,
  node: string | undefined,
  attachment: RecordedAttachment,
): Promise<Result<void>> {
  const [bridge, veth] = attachment.result.interfaces.filter((i) => !i.sandbox);
  if (!bridge || !veth) return ok(undefined);
  const r = await kernel.batch(node, [
    { op: 'linkGet', name: bridge.name },
    { op: 'linkGet', name: veth.name },
  ]);
  if (!r.ok) return err(kernelError(r.error, `CHECK: reading ${bridge.name} and ${veth.name}`));
  const [bridgeLink, vethLink] = r.value;
  const problems: string[] = [];
  if (!bridgeLink) problems.push(`bridge ${bridge.name} is missing`);
  else if (bridgeLink.kind !== 'bridge')
    problems.push(`${bridge.name} is not a bridge (it is ${bridgeLink.kind ?? 'unknown'})`);
  else if (bridge.mac && bridgeLink.mac !== bridge.mac)
    problems.push(`bridge ${bridge.name} has MAC ${bridgeLink.mac}, expected ${bridge.mac}`);
  if (!vethLink) problems.push(`host interface ${veth.name} is missing`);
  else {
    if (veth.mac && vethLink.mac !== veth.mac)
      problems.push(`host interface ${veth.name} has MAC ${vethLink.mac}, expected ${veth.mac}`);
    if (bridgeLink && vethLink.masterIndex !== bridgeLink.index)
      problems.push(`host interface ${veth.name} is no longer a port of bridge ${bridge.name}`);
  }
  if (!problems.length) return ok(undefined);
  return err(new CniError(CniCode.Internal, `CHECK failed: ${problems.join('; ')}`, problems.join('\n')));
}
