/** ResourceClaims as the preparer needs them: read one from the API (resource.k8s.io/v1), just the fields used. */
import { segment } from '../common/api-object';
import { type KubeApiClient } from '../k8s/api-client';
import { passesSoon } from '../common/api-status';
import { err, ok, type Result } from '../common/result';
import type { AllocatedConfig } from './claim-config';

export interface AllocationResult {
  readonly request: string;
  readonly driver: string;
  readonly pool: string;
  readonly device: string;
}

export interface ResourceClaim {
  readonly metadata: { readonly name: string; readonly namespace: string; readonly uid: string };
  readonly status?: {
    readonly allocation?: {
      readonly devices?: {
        readonly results?: readonly AllocationResult[];
        readonly config?: readonly AllocatedConfig[];
      };
    };
    readonly reservedFor?: readonly { readonly resource?: string; readonly name: string; readonly uid: string }[];
  };
}

export interface ClaimReader {
  /** The claim now; undefined when the API has none of that name. */
  get(namespace: string, name: string): Promise<Result<ResourceClaim | undefined, string>>;
}

/** Waits before each new try of a read the API did not answer (no answer, 429, 5xx): about 1.75 s in all. */
const RETRY_MS = [250, 500, 1000];

export class ApiClaimReader implements ClaimReader {
  constructor(
    private readonly api: KubeApiClient,
    private readonly retryMs: readonly number[] = RETRY_MS,
  ) {}

  /** A refused Prepare costs the pod a kubelet resync (kubernetes/kubernetes#139836): a hiccup of the API is waited out. */
  async get(namespace: string, name: string): Promise<Result<ResourceClaim | undefined, string>> {
    const path = `/apis/resource.k8s.io/v1/namespaces/${segment(namespace)}/resourceclaims/${segment(name)}`;
    for (let attempt = 0; ; attempt++) {
      const got = await this.api.request('GET', path, 'resourceclaims', { urgent: true });
      if (got.ok) return ok(got.value as ResourceClaim);
      if (got.error.status === 404) return ok(undefined);
      const wait = this.retryMs[attempt];
      if (wait === undefined || !passesSoon(got.error.status)) {
        const why = `${got.error.status || 'no answer'} ${got.error.message}`;
        return err(`reading ResourceClaim ${namespace}/${name}: ${why}`);
      }
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}
