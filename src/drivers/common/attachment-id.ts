/**
 * The identity of one attachment in the names Plexus gives what it makes for it on the node (host veths, switch ports,
 * socket directories): the container, the runtime's interface (CNI_IFNAME) and the pod interface. A container may be
 * ADDed under several CNI_IFNAMEs (containerd with two configs), each with its own net1: the runtime interface keeps
 * their names apart. When the two interfaces are one (the default network), the text is what it was before the
 * runtime interface was part of it, so those names did not change.
 */
import { createHash } from 'node:crypto';

/** `<container>/<pod ifname>`, or `<container>/<runtime ifname>/<pod ifname>` (no interface name contains "/"). */
export const attachmentId = (containerId: string, runtimeIfname: string, podIfname: string): string =>
  runtimeIfname === podIfname ? `${containerId}/${podIfname}` : `${containerId}/${runtimeIfname}/${podIfname}`;

/** `hex` hexadecimal digits of the attachment identity's SHA-256: a short name part no other attachment has. */
export const attachmentHash = (containerId: string, runtimeIfname: string, podIfname: string, hex: number): string =>
  createHash('sha256')
    .update(attachmentId(containerId, runtimeIfname, podIfname))
    .digest('hex')
    .slice(0, hex);

/** Link groups "PY…": beside the "PX…" range of the kernel layer's batched host deletions; no tool hands them out. */
const POD_LINK_MARK_BASE = 0x50590000;

/**
 * The link group Plexus gives a link it creates in a pod for one attachment (set in the same netlink request that
 * creates it). An undo step deletes a pod link of its name only when the link carries this mark: an interface of that
 * name that Plexus did not make for this attachment (another plugin's, another pod's) is never deleted.
 */
export const podLinkMark = (containerId: string, runtimeIfname: string, podIfname: string): number =>
  POD_LINK_MARK_BASE + parseInt(attachmentHash(containerId, runtimeIfname, podIfname, 4), 16);
