/**
 * CHECK of a pod's port on a node bridge (bridge and vxlan networks), on the node's side, as the reference bridge
 * plugin checks it: the bridge in the result is still a bridge with the result's MAC, and the host veth still has its
 * MAC, is still on that bridge and is still the peer of the pod's interface. The pod's side (its interface, MAC, addresses, routes) the engine checks for every
 * driver (engine/verbs/check.ts).
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import type { KernelPort } from '../../kernel/kernel';
import type { LinkInfo } from '../../kernel/types';
import type { RecordedAttachment } from '../driver';
import { kernelError } from './kernel-error';

export async function checkBridgePort(
  kernel: KernelPort,
  node: string | undefined,
  attachment: RecordedAttachment,
  /** The bridge's promiscuity the network's config asks for (the bridge plugin's `promiscMode`), when known. */
  promisc?: boolean,
): Promise<Result<void>> {
  const [bridge, veth] = attachment.result.interfaces.filter((i) => !i.sandbox);
  if (!bridge || !veth) return ok(undefined);
  const r = await kernel.batch(node, [
    { op: 'linkGet', name: bridge.name },
    { op: 'linkGet', name: veth.name },
  ]);
  if (!r.ok) return err(kernelError(r.error, `CHECK: reading ${bridge.name} and ${veth.name}`));
  const [bridgeLink, vethLink] = r.value;
  const pod = await podLink(kernel, attachment);
  if (!pod.ok) return pod;
  const problems: string[] = [];
  if (!bridgeLink) problems.push(`bridge ${bridge.name} is missing`);
  else if (bridgeLink.kind !== 'bridge')
    problems.push(`${bridge.name} is not a bridge (it is ${bridgeLink.kind ?? 'unknown'})`);
  else if (bridge.mac && bridgeLink.mac !== bridge.mac)
    problems.push(`bridge ${bridge.name} has MAC ${bridgeLink.mac}, expected ${bridge.mac}`);
  if (bridgeLink && promisc !== undefined && bridgeLink.promisc !== promisc)
    problems.push(`bridge ${bridge.name} is ${bridgeLink.promisc ? '' : 'not '}promiscuous, promiscMode is ${promisc}`);
  if (!vethLink) problems.push(`host interface ${veth.name} is missing`);
  else {
    if (veth.mac && vethLink.mac !== veth.mac)
      problems.push(`host interface ${veth.name} has MAC ${vethLink.mac}, expected ${veth.mac}`);
    if (bridgeLink && vethLink.masterIndex !== bridgeLink.index)
      problems.push(`host interface ${veth.name} is no longer a port of bridge ${bridge.name}`);
    // A missing pod interface is the engine's CHECK's to report.
    if (pod.value && !arePeers(vethLink, pod.value))
      problems.push(`host interface ${veth.name} is no longer the peer of ${pod.value.name}`);
  }
  if (!problems.length) return ok(undefined);
  return err(new CniError(CniCode.Internal, `CHECK failed: ${problems.join('; ')}`, problems.join('\n')));
}

/** The pod's interface of the attachment as the kernel has it now, or null when it is gone. */
async function podLink(kernel: KernelPort, attachment: RecordedAttachment): Promise<Result<LinkInfo | null>> {
  const iface = attachment.result.interfaces.find((i) => i.sandbox && i.name === attachment.ifname);
  if (!iface?.sandbox) return ok(null);
  const r = await kernel.getLink(iface.sandbox, iface.name);
  return r.ok ? r : err(kernelError(r.error, `CHECK: reading ${iface.name} in ${iface.sandbox}`));
}

/**
 * Two veth ends are each other's peer: each one's link index is the other's index (in its own netns). A kernel that
 * does not report the link index (an in-memory one) is not judged.
 */
const arePeers = (a: LinkInfo, b: LinkInfo): boolean =>
  a.linkIndex === undefined || b.linkIndex === undefined || (a.linkIndex === b.index && b.linkIndex === a.index);
