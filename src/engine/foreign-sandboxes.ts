/**
 * Sandboxes another multi-network plugin made before Plexus served the node (Multus's), which Plexus tears down as
 * that plugin would have. The engine asks here before it forwards the DEL of a sandbox it has no record of to the
 * node's own plugins; node/main.ts plugs the real thing in (src/adopt/).
 */
import type { Result } from '../cni/errors';
import type { CniArgs } from '../cni/args';

export interface ForeignDel {
  readonly containerId: string;
  /** CNI_NETNS as the runtime sent it: "" on containerd's last DEL. */
  readonly netns: string;
  readonly ifname: string;
  readonly args: CniArgs;
}

export interface AdoptedSandbox {
  readonly containerId: string;
  /** Who made it (e.g. "multus"). */
  readonly maker: string;
  /** Its networks, in the order they were attached, with the interface each got. */
  readonly networks: readonly { readonly name: string; readonly ifname: string }[];
}

export interface ForeignSandboxes {
  /** Tears the sandbox down as its maker would; undefined when it is not one of these sandboxes. */
  del(req: ForeignDel): Promise<Result<void> | undefined>;
  /** Checks the sandbox as its maker would; undefined when it is not one of these sandboxes. */
  check(req: ForeignDel): Promise<Result<void> | undefined>;
  /** The sandboxes still held, for plexusctl. */
  list(): AdoptedSandbox[];
}
