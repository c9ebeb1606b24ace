/** The errors cluster IPAM answers when this node may not allocate: named builders, one message each. */
import { CniCode, CniError } from '../../cni/errors';

/** This process may not allocate for its node (another plexusd holds its lease, or the lease could not be renewed). */
export const notServing = (reason: string): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `cluster IPAM is not serving on this node: ${reason}`,
    'plexusd logs the cause at error level; the runtime retries',
  );

/** A block of the pool was deleted under this node while `leased` of its pods' addresses are in it. */
export const blockLost = (block: string, pool: string, leased: number): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `block ${block} of pool ${pool} was deleted while ${leased} address(es) in it are leased on this node: no new address is given in the pool until this node holds the block again`,
    "this node claims it again on its next reconcile pass if no other node has; if another node holds it, both may hand out its addresses: move this node's pods of the block, then delete their old sandboxes",
  );

/** A new pool overlaps an older one; the older one keeps its addresses until no network names it and no block uses it. */
export const overlapsOlder = (network: string, pool: string, older: string, subnet: string): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `network ${network}: pool ${pool} overlaps pool ${older} (${subnet}), which came first; overlapping pools are refused`,
    `if no network uses pool ${older} any more, it is deleted once no block of it has been held for --ipam-node-grace-seconds`,
  );
