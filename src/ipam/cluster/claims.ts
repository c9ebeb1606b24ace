/**
 * IPAMClaims (k8snetworkplumbingwg/ipamclaims, `k8s.cni.cncf.io/v1alpha1`, deploy/crds/30-crd-ipamclaims.yaml): an
 * object in the pod's namespace that owns a pod interface's addresses instead of the pod, so a pod that is restarted
 * or rescheduled (a KubeVirt VM's launcher pod) gets them back. A selection element names one with
 * `ipam-claim-reference` (NPWG v1.3). Its spec names the network and interface it is for; its status.ips lists the
 * addresses, as CIDRs, and status.ownerPod the pod that last got new ones.
 *
 * Where the addresses are really held is the pool's IPBlocks: each block lists the addresses of it that claims own
 * (objects.ts ClaimEntry), and the block's node never hands those out (cluster-ipam.ts). This file is the claim's API
 * and the pure rules; cluster-ipam.ts does the allocation.
 */
import { type ObjectMeta, segment } from '../../common/api-object';
import { CniCode, CniError } from '../../cni/errors';
import { formatIp, parseCidr, parseIp } from '../../common/ip';
import { type ClusterApi } from './api-port';
import { type PoolBlock, type PoolLayout, blockOf } from './blocks';

export const CLAIMS_GROUP_VERSION = 'k8s.cni.cncf.io/v1alpha1';

export interface ClaimObject {
  readonly metadata?: ObjectMeta;
  readonly spec?: { readonly network?: string; readonly interface?: string };
  readonly status?: {
    readonly ips?: readonly string[];
    readonly ownerPod?: string;
    readonly conditions?: readonly unknown[];
  };
}

/** A pod's reference to a claim: the claim lives in the pod's namespace. */
export interface IpamClaimRef {
  readonly namespace: string;
  readonly name: string;
}

export const claimKey = (ref: IpamClaimRef): string => `${ref.namespace}/${ref.name}`;

export function parseClaimKey(key: string): IpamClaimRef | undefined {
  const [namespace, name, ...rest] = key.split('/');
  return namespace && name && rest.length === 0 ? { namespace, name } : undefined;
}

const claimPath = (ref: IpamClaimRef): string =>
  `/apis/${CLAIMS_GROUP_VERSION}/namespaces/${segment(ref.namespace)}/ipamclaims/${segment(ref.name)}`;

export class IpamClaims {
  constructor(private readonly client: ClusterApi) {}

  get(ref: IpamClaimRef) {
    return this.client.request('GET', claimPath(ref), 'ipamclaims', { urgent: true });
  }

  /** Writes status (the status subresource), guarded by the resourceVersion `claim` was read at. */
  updateStatus(ref: IpamClaimRef, claim: ClaimObject, status: NonNullable<ClaimObject['status']>) {
    return this.client.request('PUT', `${claimPath(ref)}/status`, 'ipamclaims', {
      urgent: true,
      body: { apiVersion: CLAIMS_GROUP_VERSION, kind: 'IPAMClaim', ...claim, status },
    });
  }
}

/** An address a claim holds in a pool, and the block it lies in. */
export interface ClaimedAddress {
  /** Without prefix, canonical. */
  readonly address: string;
  readonly block: PoolBlock;
}

/**
 * The addresses of a claim's status.ips that lie in this pool, by range set (one per set, as any attachment; a second
 * one in a set is ignored). Addresses of other pools (the claim's interface on another network) are not this pool's.
 */
export function claimedInPool(layout: PoolLayout, ips: readonly string[]): Map<number, ClaimedAddress> {
  const bySet = new Map<number, ClaimedAddress>();
  for (const text of ips) {
    const ip = parseCidr(text) ?? parseIp(text);
    if (ip === undefined) continue;
    const block = blockOf(layout, ip);
    if (!block.ok || bySet.has(block.value.set)) continue;
    bySet.set(block.value.set, { address: formatIp(ip.family, ip.value), block: block.value });
  }
  return bySet;
}

/** status.ips after this pool's new addresses (CIDRs, e.g. 10.1.0.7/24) are added; the others are kept as they are. */
export function statusIpsWith(existing: readonly string[], added: readonly string[]): string[] {
  const same = (a: string, b: string): boolean => (a.split('/')[0] ?? a) === (b.split('/')[0] ?? b);
  return [...existing.filter((x) => !added.some((y) => same(x, y))), ...added];
}

/**
 * A claim that does not exist (yet). KubeVirt creates a VM's claims around the time it creates the launcher pod, and
 * upstream (OVN-Kubernetes) fails the pod's allocation and retries while the claim is missing: so "try again later"
 * (11), which the kubelet does by retrying the sandbox.
 */
export const missingClaim = (ref: IpamClaimRef, network: string): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `IPAMClaim ${claimKey(ref)} (ipam-claim-reference of network ${network}) does not exist`,
    "create it (kind IPAMClaim, k8s.cni.cncf.io/v1alpha1, in the pod's namespace), or remove ipam-claim-reference from the selection; the runtime retries",
  );
