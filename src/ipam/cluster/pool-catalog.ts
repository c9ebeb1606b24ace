/**
 * The pools this node knows: each network's pool, its IPPool read (or created) and checked once against the API
 * (same ranges, no overlap with an older pool) before its first allocation.
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import type { ClusterIpamConfig } from '../config';
import { type PoolLayout, poolLayout, poolsOverlap } from './blocks';
import { type PoolObject, type PoolObjects, type PoolSpec, apiError } from './objects';
import { overlapsOlder } from './refusals';

/** JSON with sorted keys: the API server gives fields back in its own order. */
const canonical = (value: unknown): string =>
  JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );

const specOf = (config: ClusterIpamConfig): PoolSpec => ({
  ranges: config.ranges,
  exclude: config.exclude,
  blockPrefix: config.blockPrefix,
});

export class PoolCatalog {
  private readonly layouts = new Map<string, PoolLayout>();
  private readonly loads = new Map<string, Promise<Result<PoolLayout>>>();
  /** Pool -> the canonical spec its layout was checked against the API with. */
  private readonly specs = new Map<string, string>();

  constructor(private readonly objects: PoolObjects) {}

  /** The pools whose layouts are known. */
  known(): string[] {
    return [...this.layouts.keys()];
  }

  /** Forgets a pool's layout: its next ADD reads the pool again (or creates it). */
  forget(pool: string): void {
    this.layouts.delete(pool);
    this.specs.delete(pool);
  }

  /**
   * The pool of a network, its IPPool created if absent. Refused: a pool of that name with other ranges, or one that
   * overlaps another pool (the older pool keeps its addresses; equal ages go by name, so every node agrees).
   */
  async poolFor(network: string, config: ClusterIpamConfig): Promise<Result<PoolLayout>> {
    const layout = poolLayout(network, config);
    if (!layout.ok) return layout;
    const name = layout.value.name;
    const spec = specOf(config);
    const known = this.layouts.get(name);
    if (known !== undefined && this.specs.get(name) === canonical(spec)) return ok(known);
    // The first ADDs of a pool arrive together: one of them reads (or creates) and checks it, the others wait for that.
    const key = `${name}\u0000${canonical(spec)}`;
    let loading = this.loads.get(key);
    if (!loading) {
      loading = this.load(network, layout.value, spec).finally(() => this.loads.delete(key));
      this.loads.set(key, loading);
    }
    return loading;
  }

  /** A pool's layout, from memory or from its IPPool object. */
  async layoutOf(pool: string): Promise<Result<PoolLayout>> {
    const known = this.layouts.get(pool);
    if (known !== undefined) return ok(known);
    const got = await this.objects.getPool(pool);
    if (!got.ok) return err(apiError(`reading IPPool ${pool}`, got.error));
    const spec = (got.value as PoolObject).spec;
    if (spec === undefined) return err(new CniError(CniCode.IoFailure, `IPPool ${pool} has no spec`));
    return poolLayout(pool, {
      type: 'cluster',
      flavour: 'plexus',
      pool,
      ranges: spec.ranges,
      exclude: spec.exclude,
      blockPrefix: spec.blockPrefix,
      routes: [],
    });
  }

  private async load(network: string, layout: PoolLayout, spec: PoolSpec): Promise<Result<PoolLayout>> {
    const name = layout.name;
    let got = await this.objects.getPool(name);
    if (!got.ok && got.error.status === 404) {
      const made = await this.objects.createPool(name, spec);
      got = made.ok || made.error.status !== 409 ? made : await this.objects.getPool(name);
    }
    if (!got.ok) return err(apiError(`reading IPPool ${name}`, got.error));
    const pool = got.value as PoolObject;
    if (canonical(pool.spec) !== canonical(spec)) {
      return err(
        new CniError(
          CniCode.InvalidNetworkConfig,
          `network ${network}: pool ${name} exists with other ranges (${JSON.stringify(pool.spec)}); a pool's ranges cannot change while it exists`,
        ),
      );
    }
    const all = await this.objects.listPools();
    if (!all.ok) return err(apiError('listing IPPools', all.error));
    const age = (p: PoolObject): string => `${p.metadata?.creationTimestamp ?? ''}\u0000${p.metadata?.name ?? ''}`;
    for (const other of (all.value as { items?: PoolObject[] }).items ?? []) {
      if (other.metadata?.name === name || other.spec === undefined) continue;
      const overlap = poolsOverlap(spec.ranges, other.spec.ranges);
      if (overlap !== undefined && age(other) < age(pool)) {
        return err(overlapsOlder(network, name, other.metadata?.name ?? '', overlap.subnet));
      }
    }
    this.layouts.set(name, layout);
    this.specs.set(name, canonical(spec));
    return ok(layout);
  }
}
