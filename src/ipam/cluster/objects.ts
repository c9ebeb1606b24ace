/**
 * IPPool and IPBlock objects (deploy/crds/20-crd-ipam.yaml) on the API: created if absent under deterministic names, and
 * deleted only with a precondition on the version that was read, so a block changes hands once and never silently.
 */
import { type ApiFailure, type ObjectMeta, segment } from '../../common/api-object';
import { CniCode, CniError } from '../../cni/errors';
import { passesSoon } from '../../common/api-status';
import { type ClusterApi } from './api-port';
import type { IpRange } from '../config';

export const GROUP = 'ipam.plexus.io';
export const VERSION = 'v1alpha1';
/** The API group and version the IPAM CRDs are served under. */
export const IPAM_GROUP_VERSION = `${GROUP}/${VERSION}`;
export const BLOCKS_PATH = `/apis/${GROUP}/${VERSION}/ipblocks`;
export const POOLS_PATH = `/apis/${GROUP}/${VERSION}/ippools`;

export interface PoolSpec {
  readonly ranges: readonly (readonly IpRange[])[];
  readonly exclude: readonly string[];
  readonly blockPrefix: { readonly v4: number; readonly v6: number };
}
export interface PoolObject {
  readonly metadata?: ObjectMeta & { readonly creationTimestamp?: string };
  readonly spec?: PoolSpec;
}
export interface BlockObject {
  readonly metadata?: ObjectMeta & { readonly labels?: Record<string, string> };
  readonly spec?: {
    readonly pool?: string;
    readonly cidr?: string;
    readonly node?: string;
    readonly claims?: readonly ClaimEntry[];
  };
}

/**
 * An address of the block that an IPAMClaim owns (claims.ts): the block's node never hands it out, whoever uses it.
 * `nodes` are the nodes that gave it to a pod since it was recorded; the entry goes only when the claim is deleted and
 * none of them still has a lease on it.
 */
export interface ClaimEntry {
  /** The address, without prefix. */
  readonly address: string;
  /** namespace/name of the IPAMClaim. */
  readonly claim: string;
  /** The claim's UID: a claim deleted and created again under the same name is another claim. */
  readonly claimUid: string;
  readonly nodes: readonly string[];
}

/** An API failure as a CNI error: unreachable, overloaded or timed out is "try again later" (11), the rest an I/O failure. */
export function apiError(what: string, failure: ApiFailure): CniError {
  return new CniError(
    passesSoon(failure.status) ? CniCode.TryAgainLater : CniCode.IoFailure,
    `${what}: ${failure.message}`,
    `HTTP ${failure.status}`,
  );
}

export class PoolObjects {
  constructor(private readonly client: ClusterApi) {}

  getPool(name: string) {
    return this.client.request('GET', `${POOLS_PATH}/${segment(name)}`, 'ippools', { urgent: true });
  }

  createPool(name: string, spec: PoolSpec) {
    return this.client.request('POST', POOLS_PATH, 'ippools', {
      urgent: true,
      body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'IPPool', metadata: { name }, spec },
    });
  }

  listPools() {
    return this.client.request('GET', `${POOLS_PATH}?resourceVersion=0`, 'ippools', { urgent: true });
  }

  /** Deletes a pool only if it is still the object (uid) at the version (resourceVersion) that was read. */
  deletePool(name: string, uid: string, resourceVersion: string) {
    return this.client.request('DELETE', `${POOLS_PATH}/${segment(name)}`, 'ippools', {
      body: { apiVersion: 'v1', kind: 'DeleteOptions', preconditions: { uid, resourceVersion } },
    });
  }

  /** Every block, read from etcd (not a cache): the last check before a pool is deleted. */
  listBlocks() {
    return this.client.request('GET', BLOCKS_PATH, 'ipblocks');
  }

  /** Claims a block for `node`: 201 means it is ours, 409 that another node has it. */
  createBlock(name: string, pool: string, cidr: string, node: string) {
    return this.client.request('POST', BLOCKS_PATH, 'ipblocks', {
      urgent: true,
      body: {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: 'IPBlock',
        metadata: { name, labels: { [`${GROUP}/pool`]: pool } },
        spec: { pool, cidr, node },
      },
    });
  }

  getBlock(name: string) {
    return this.client.request('GET', `${BLOCKS_PATH}/${segment(name)}`, 'ipblocks', { urgent: true });
  }

  /**
   * Replaces a block's claim entries; the object carries the resourceVersion it was read at, so the API server refuses
   * (409) the update if anyone changed the block since. pool, cidr and node cannot change (the CRD's rule).
   */
  updateBlock(block: BlockObject) {
    return this.client.request('PUT', `${BLOCKS_PATH}/${segment(block.metadata?.name ?? '')}`, 'ipblocks', {
      urgent: true,
      body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'IPBlock', ...block },
    });
  }

  /** Deletes a block only if it is still the object (uid) at the version (resourceVersion) that was read. */
  deleteBlock(name: string, uid: string, resourceVersion: string) {
    return this.client.request('DELETE', `${BLOCKS_PATH}/${segment(name)}`, 'ipblocks', {
      body: { apiVersion: 'v1', kind: 'DeleteOptions', preconditions: { uid, resourceVersion } },
    });
  }

  getNode(name: string) {
    return this.client.request('GET', `/api/v1/nodes/${segment(name)}`, 'nodes');
  }

  /** The names of the Nodes in the API (from the server's watch cache). */
  listNodes() {
    return this.client.request('GET', '/api/v1/nodes?resourceVersion=0', 'nodes');
  }
}
