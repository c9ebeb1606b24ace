/**
 * What the consumer reads from the API, as a port: a pod, a ResourceClaim, a driver's ResourceSlices of a node. The
 * API implementation validates each answer (shapes.ts); tests plug in objects of their own.
 */
import { segment } from '../../common/api-object';
import { type KubeApiClient } from '../../k8s/api-client';
import { err, ok, type Result } from '../../common/result';
import {
  ClaimSchema,
  PodSchema,
  SliceListSchema,
  type AllocatedClaim,
  type ClaimingPod,
  type PublishedSlice,
} from './shapes';

export interface ClaimsPort {
  /** The pod now; undefined when the API has none of that name. */
  pod(namespace: string, name: string): Promise<Result<ClaimingPod | undefined, string>>;
  /** The claim now; undefined when the API has none of that name. */
  claim(namespace: string, name: string): Promise<Result<AllocatedClaim | undefined, string>>;
  /** The ResourceSlices of one driver on one node (every node's when `nodeName` is undefined). */
  slices(driver: string, nodeName: string | undefined): Promise<Result<PublishedSlice[], string>>;
}

const RESOURCE = '/apis/resource.k8s.io/v1';

const malformed = (what: string, issues: string): string =>
  `${what}: the API's answer has unexpected fields: ${issues}`;

export class ApiClaimsPort implements ClaimsPort {
  constructor(private readonly api: KubeApiClient) {}

  async pod(namespace: string, name: string): Promise<Result<ClaimingPod | undefined, string>> {
    const what = `reading pod ${namespace}/${name}`;
    const got = await this.get(`/api/v1/namespaces/${segment(namespace)}/pods/${segment(name)}`, 'pods', what);
    if (!got.ok) return got;
    if (got.value === undefined) return ok(undefined);
    const parsed = PodSchema.safeParse(got.value);
    return parsed.success ? ok(parsed.data) : err(malformed(what, parsed.error.message));
  }

  async claim(namespace: string, name: string): Promise<Result<AllocatedClaim | undefined, string>> {
    const what = `reading ResourceClaim ${namespace}/${name}`;
    const path = `${RESOURCE}/namespaces/${segment(namespace)}/resourceclaims/${segment(name)}`;
    const got = await this.get(path, 'resourceclaims', what);
    if (!got.ok) return got;
    if (got.value === undefined) return ok(undefined);
    const parsed = ClaimSchema.safeParse(got.value);
    return parsed.success ? ok(parsed.data) : err(malformed(what, parsed.error.message));
  }

  async slices(driver: string, nodeName: string | undefined): Promise<Result<PublishedSlice[], string>> {
    const selector = [...(nodeName ? [`spec.nodeName=${nodeName}`] : []), `spec.driver=${driver}`].join(',');
    const what = `listing the ResourceSlices of driver ${driver}`;
    const path = `${RESOURCE}/resourceslices?fieldSelector=${encodeURIComponent(selector)}`;
    const got = await this.get(path, 'resourceslices', what);
    if (!got.ok) return got;
    const parsed = SliceListSchema.safeParse(got.value ?? {});
    return parsed.success ? ok(parsed.data.items ?? []) : err(malformed(what, parsed.error.message));
  }

  private async get(path: string, resource: string, what: string): Promise<Result<unknown, string>> {
    const got = await this.api.request('GET', path, resource, { urgent: true });
    if (got.ok) return ok(got.value);
    if (got.error.status === 404) return ok(undefined);
    return err(`${what}: ${got.error.status || 'no answer'} ${got.error.message}`);
  }
}
