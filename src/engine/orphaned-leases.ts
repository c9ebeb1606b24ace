/**
 * Leases that no journal record holds (see LeaseHolders): found, and released. Each container's leases are checked
 * again under its lock, against its records as they are then, so an ADD that reserved an address after the first
 * look keeps it.
 */
import type { Lease } from '../ipam';
import type { EngineContext } from './context';
import type { Journal } from './journal';

type OrphanPorts = Pick<EngineContext, 'ipam' | 'locks' | 'log'> & { readonly journal: Journal };

/** Releases one container's orphans that are still orphans under its lock; answers those released. */
async function releaseContainerOrphans(
  ctx: OrphanPorts,
  containerId: string,
  leases: readonly Lease[],
): Promise<Lease[]> {
  const released: Lease[] = [];
  await ctx.locks.run(containerId, async () => {
    const current = await ctx.journal.leaseHolders(containerId);
    const owners = new Map(leases.filter((l) => !current.holds(l)).map((l) => [`${l.network}\u0000${l.ifname}`, l]));
    for (const { network, ifname } of owners.values()) {
      const r = await ctx.ipam.release(network, containerId, ifname);
      if (r.ok) released.push(...r.value);
      else {
        const why = 'could not release an orphaned lease; the next GC retries';
        ctx.log.error({ network, containerId, ifname, err: r.error.message }, why);
      }
    }
  });
  return released;
}

/** Releases the leases no record holds and returns them; with dryRun only returns them. */
export async function releaseOrphanedLeases(ctx: OrphanPorts, dryRun = false): Promise<Lease[]> {
  const holders = await ctx.journal.leaseHolders();
  const orphans = (await ctx.ipam.leases()).filter((lease) => !holders.holds(lease));
  if (dryRun || orphans.length === 0) return orphans;
  const released: Lease[] = [];
  const byContainer = new Map<string, Lease[]>();
  for (const lease of orphans) {
    byContainer.set(lease.containerId, [...(byContainer.get(lease.containerId) ?? []), lease]);
  }
  for (const [containerId, leases] of byContainer) {
    if (containerId === '') {
      // A lease file without an owner (torn by a crash mid-write) blocks its address for nobody.
      released.push(...(await ctx.ipam.releaseUnless((lease) => lease.containerId !== '')));
      continue;
    }
    released.push(...(await releaseContainerOrphans(ctx, containerId, leases)));
  }
  return released;
}
