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
  /** Its networks, in the order they were attached, with the interface each got (and, when asked, its addresses). */
  readonly networks: readonly AdoptedNetwork[];
  /** The pod it was made for and its network namespace, where its maker recorded them (for the orphan sweep). */
  readonly pod?: { readonly namespace: string; readonly name: string; readonly uid?: string };
  readonly netns?: string;
}

export interface AdoptedNetwork {
  readonly name: string;
  readonly ifname: string;
  /** The addresses its plugins gave it, as recorded at ADD (CIDR notation); only when the listing asked for them. */
  readonly ips?: readonly string[];
}

/** What a listing reads of each sandbox beyond its networks: their addresses, for plexusctl. */
export interface AdoptedListOptions {
  readonly addresses?: boolean;
}

/** What a foreign DEL did: not one of these sandboxes, done (or failed), or one whose record cannot be read. */
export type ForeignDelOutcome =
  | { readonly kind: 'not-mine' }
  | { readonly kind: 'done'; readonly result: Result<void> }
  | { readonly kind: 'unreadable'; readonly what: string };

export interface ForeignSandboxes {
  /**
   * Tears the sandbox down as its maker would. An unreadable record of it is for the engine to fall back on what the
   * maker would (Multus: the pod's annotation and the networks as they are now).
   */
  del(req: ForeignDel): Promise<ForeignDelOutcome>;
  /** Forgets an unreadable record once the engine's fallback DEL ran (`what` from the outcome). */
  forget(what: string): void;
  /** Checks the sandbox as its maker would; undefined when it is not one of these sandboxes. */
  check(req: ForeignDel): Promise<Result<void> | undefined>;
  /** The sandboxes still held, for plexusctl, the GC and the orphan sweep. */
  list(options?: AdoptedListOptions): AdoptedSandbox[];
  /**
   * Whether the runtime made the sandbox under this network name (the name of the config it called, as its own
   * record of the call says): a CNI GC under any other name leaves it alone, as it leaves Plexus's own attachments.
   */
  madeUnder(sandbox: AdoptedSandbox, network: string): boolean;
}
