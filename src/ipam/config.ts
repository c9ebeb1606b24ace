/**
 * The `ipam` section of a network config as parse-config.ts leaves it: validated, every field filled in and canonical.
 */

/** One range of a range set; after parsing every field is filled in and canonical. */
export interface IpRange {
  readonly subnet: string;
  readonly rangeStart?: string;
  readonly rangeEnd?: string;
  readonly gateway?: string;
}
export interface IpamRoute {
  readonly dst: string;
  readonly gw?: string;
}
export interface DnsSpec {
  readonly nameservers?: readonly string[];
  readonly domain?: string;
  readonly search?: readonly string[];
  readonly options?: readonly string[];
}
export type IpamConfig =
  | {
      readonly type: 'host-local';
      readonly ranges: readonly (readonly IpRange[])[];
      readonly routes: readonly IpamRoute[];
      readonly dns?: DnsSpec;
      /** The reference plugin's `dataDir` (absolute); unset: the node's default (host-local's /var/lib/cni/networks). */
      readonly dataDir?: string;
    }
  | {
      readonly type: 'static';
      readonly addresses: readonly { readonly address: string; readonly gateway?: string }[];
      readonly routes: readonly IpamRoute[];
      readonly dns?: DnsSpec;
    }
  | ClusterIpamConfig;

/**
 * Cluster-wide IPAM (`plexus`, or a Whereabouts config taken as it is): a pool on the Kubernetes API, split into
 * blocks that nodes claim. `ranges` are host-local's range sets (one address per set); `exclude` are CIDRs never
 * handed out; `pool` names the pool (Whereabouts' network_name), so several networks may share one.
 */
export interface ClusterIpamConfig {
  readonly type: 'cluster';
  readonly flavour: 'plexus' | 'whereabouts';
  readonly pool?: string;
  readonly ranges: readonly (readonly IpRange[])[];
  readonly exclude: readonly string[];
  /** Prefix length of a block, per family: a node claims addresses this many at a time. */
  readonly blockPrefix: { readonly v4: number; readonly v6: number };
  readonly routes: readonly IpamRoute[];
  readonly dns?: DnsSpec;
}
