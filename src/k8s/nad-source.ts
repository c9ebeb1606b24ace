/**
 * NetworkAttachmentDefinitions from the Kubernetes API (k8s.cni.cncf.io/v1, every namespace), as a NetworkSource: an
 * informer keeps each one parsed in memory, so the engine's lookups are synchronous and cost no API request. A NAD
 * that does not parse is kept as its error, so a lookup of it says what is wrong with it, and list() reports it.
 */
import { segment } from '../common/api-object';
import { CniCode, CniError, err, type Result } from '../cni/errors';
import { type ClaimChange, ClaimedNetworks, type DefinitionOrigin } from '../networks/claimed-networks';
import { clashError, type ClaimsOf } from '../networks/exclusive-claims';
import { type NadConfigSource, type NetworkDefinition, parseNad } from '../networks/nad';
import type { NetworkReader, NetworkSource } from '../networks/source';
import { type KubeApiClient } from './api-client';
import { type ApiObject, Informer } from './informer';

const PATH = '/apis/k8s.cni.cncf.io/v1/network-attachment-definitions';

/** What networks claim exclusively (the drivers say), and whom to tell when a refusal starts or ends (nad-refusals.ts). */
export interface ClaimRules {
  readonly of: ClaimsOf;
  readonly changed: (change: ClaimChange) => void;
}

const keyOf = (obj: ApiObject): string => `${obj.metadata?.namespace ?? 'default'}/${obj.metadata?.name ?? ''}`;

export class ApiNetworkSource implements NetworkSource, NetworkReader {
  private readonly byKey = new Map<string, Result<NetworkDefinition>>();
  private readonly informer: Informer<ApiObject>;
  private readonly claimed: ClaimedNetworks | undefined;

  constructor(
    private readonly client: KubeApiClient,
    /** Where NADs with an empty spec.config find their CNI config on the node (--cni-conf-dir). */
    private readonly configs?: NadConfigSource,
    onError: (message: string) => void = () => undefined,
    private readonly claims?: ClaimRules,
  ) {
    this.claimed = claims ? new ClaimedNetworks(claims.of) : undefined;
    // Each NAD is kept parsed (byKey); the informer keeps only its metadata.
    this.informer = new Informer<ApiObject>(
      client,
      PATH,
      'network-attachment-definitions',
      {},
      (obj) => ({ metadata: { ...obj.metadata } }),
      {
        upsert: (obj) => this.put(obj),
        remove: (obj) => {
          this.byKey.delete(keyOf(obj));
          this.noteClaims(keyOf(obj), undefined, obj);
        },
        error: onError,
      },
    );
  }

  /** Lists and starts watching; resolves when the first list is in memory (retrying while the API is away). */
  start(): Promise<void> {
    return this.informer.start();
  }

  stop(): Promise<void> {
    return this.informer.stop();
  }

  /** Whether the first list has been read: before it, an unknown network may just not be loaded yet. */
  get ready(): boolean {
    return this.informer.ready;
  }

  private put(obj: ApiObject): void {
    const parsed = parseNad(obj, `NetworkAttachmentDefinition ${keyOf(obj)} in the API`, this.configs);
    this.byKey.set(keyOf(obj), parsed);
    this.noteClaims(keyOf(obj), parsed.ok ? parsed.value : undefined, obj);
  }

  /** A NAD that claims what an older one holds (a VXLAN VNI) is refused as it is read, and said so once. */
  private noteClaims(key: string, definition: NetworkDefinition | undefined, obj: ApiObject): void {
    if (!this.claimed || !this.claims) return;
    const change = this.claimed.update(key, definition, originOf(obj));
    if (change.refused.length || change.served.length) this.claims.changed(change);
  }

  get(namespace: string, name: string): Result<NetworkDefinition> {
    const key = `${namespace}/${name}`;
    const clash = this.claimed?.clashOf(key);
    if (clash) return err(clashError(clash));
    return this.byKey.get(key) ?? err(notDefined(namespace, name, this.informer.ready));
  }

  /**
   * The cached definition, else the API's answer now (not kept: the watch brings it): a NAD the informer has not
   * seen yet is not refused for that. When the API cannot answer, the cache's answer stands.
   */
  async read(namespace: string, name: string): Promise<Result<NetworkDefinition>> {
    const cached = this.get(namespace, name);
    if (cached.ok || this.byKey.has(`${namespace}/${name}`)) return cached;
    const path = `/apis/k8s.cni.cncf.io/v1/namespaces/${segment(namespace)}/network-attachment-definitions/${segment(name)}`;
    const got = await this.client.request('GET', path, 'network-attachment-definitions', { urgent: true });
    const where = `NetworkAttachmentDefinition ${namespace}/${name} in the API`;
    if (!got.ok) return got.error.status === 404 ? err(notDefined(namespace, name, true)) : cached;
    const parsed = parseNad(got.value, where, this.configs);
    const clash = parsed.ok ? this.claimed?.clashIfAdded(parsed.value, originOf(got.value as ApiObject)) : undefined;
    return clash ? err(clashError(clash)) : parsed;
  }

  list(): { networks: NetworkDefinition[]; errors: CniError[] } {
    const networks: NetworkDefinition[] = [];
    const errors: CniError[] = [];
    for (const r of this.byKey.values()) {
      const clash = r.ok ? this.claimed?.clashOf(r.value.key) : undefined;
      if (clash) errors.push(clashError(clash));
      else if (r.ok) networks.push(r.value);
      else errors.push(r.error);
    }
    return { networks, errors };
  }
}

/** The NAD's creation time and uid, when they are strings (the rest of it was validated by parseNad). */
const originOf = (obj: ApiObject): DefinitionOrigin => {
  const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
  return { createdAt: text(obj.metadata?.creationTimestamp), uid: text(obj.metadata?.uid) };
};

const notDefined = (namespace: string, name: string, loaded: boolean): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `network ${namespace}/${name} is not defined: ${
      loaded
        ? 'there is no such NetworkAttachmentDefinition in the API'
        : 'the NetworkAttachmentDefinitions are not loaded from the API yet'
    }`,
    `kubectl get network-attachment-definitions -n ${namespace}`,
  );
