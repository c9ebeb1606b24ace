/**
 * Prepared claims nobody will unprepare. The kubelet calls NodeUnprepareResources when a claim's pod goes, but not
 * when it lost its own record of prepared claims (its root dir wiped) or was away while the claim and its pods were
 * deleted and the claim's finalizer lifted by hand: such a record would hold its device forever. A record is stale
 * when its claim is gone from the API (or another claim has its name now), or every pod it was prepared for is gone;
 * and it is released only while no such pod has networks on this node, since its device may still be in a sandbox.
 */
import { segment } from '../common/api-object';
import type { Logger } from 'pino';
import { type KubeApiClient } from '../k8s/api-client';
import { err, ok, type Result } from '../common/result';
import type { ClaimReader } from './claims-api';
import type { PreparedClaim, PreparedClaims } from './prepared-claims';

export interface PodPresence {
  /** Whether the pod `namespace/name` with this UID exists in the API now. */
  exists(namespace: string, name: string, uid: string): Promise<Result<boolean, string>>;
}

export class ApiPodPresence implements PodPresence {
  constructor(private readonly api: KubeApiClient) {}

  async exists(namespace: string, name: string, uid: string): Promise<Result<boolean, string>> {
    const got = await this.api.request('GET', `/api/v1/namespaces/${segment(namespace)}/pods/${segment(name)}`, 'pods');
    if (got.ok) return ok((got.value as { metadata?: { uid?: string } }).metadata?.uid === uid);
    if (got.error.status === 404) return ok(false);
    return err(`reading pod ${namespace}/${name}: ${got.error.status || 'no answer'} ${got.error.message}`);
  }
}

export interface StaleClaimsEnv {
  readonly claims: ClaimReader;
  readonly pods: PodPresence;
  /** UIDs of the pods that have networks on this node now (the engine's records); absent: none known. */
  readonly attachedPods?: () => Promise<ReadonlySet<string>>;
  readonly log: Logger;
}

/** Why a record is stale, or undefined when it is not (or the API could not say: kept until it can). */
async function staleness(env: StaleClaimsEnv, record: PreparedClaim): Promise<string | undefined> {
  const claim = await env.claims.get(record.namespace, record.name);
  if (!claim.ok) return undefined;
  if (!claim.value) return 'its ResourceClaim is gone from the API';
  if (claim.value.metadata.uid !== record.uid)
    return `its ResourceClaim was made again (UID ${claim.value.metadata.uid})`;
  if (record.pods.length === 0) return undefined;
  for (const pod of record.pods) {
    const there = await env.pods.exists(record.namespace, pod.name, pod.uid);
    if (!there.ok || there.value) return undefined;
  }
  return 'every pod it was prepared for is gone';
}

/** The stale records of `prepared`, each with why (nothing is removed here). */
export async function staleClaims(
  env: StaleClaimsEnv,
  prepared: PreparedClaims,
): Promise<{ readonly record: PreparedClaim; readonly why: string }[]> {
  const attached = (await env.attachedPods?.()) ?? new Set<string>();
  const out: { record: PreparedClaim; why: string }[] = [];
  for (const record of prepared.all()) {
    if (record.pods.some((p) => attached.has(p.uid))) continue;
    const why = await staleness(env, record);
    if (why) out.push({ record, why });
  }
  return out;
}
