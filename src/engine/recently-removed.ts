/**
 * Attachments this daemon removed lately (container ID and ifname), oldest first: the runtime's repeated DEL of a
 * sandbox Plexus already cleaned (containerd sends a second one) must not be forwarded to the node's own plugins.
 */

/** How many removed attachments are remembered. */
const RECENTLY_REMOVED_KEPT = 4096;

const keyOf = (containerId: string, ifname: string): string => `${containerId}\u0000${ifname}`;

export class RecentlyRemoved {
  private readonly removed = new Map<string, true>();

  constructor(private readonly kept = RECENTLY_REMOVED_KEPT) {}

  add(containerId: string, ifname: string): void {
    this.removed.set(keyOf(containerId, ifname), true);
    if (this.removed.size > this.kept) this.removed.delete(this.removed.keys().next().value!);
  }

  has(containerId: string, ifname: string): boolean {
    return this.removed.has(keyOf(containerId, ifname));
  }
}
