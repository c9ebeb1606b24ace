/**
 * NetworkAttachmentDefinitions from the Kubernetes API (k8s.cni.cncf.io/v1, every namespace), as a NetworkSource: an
 * informer keeps each one parsed in memory, so the engine's lookups are synchronous and cost no API request. A NAD
 * that does not parse is kept as its error, so a lookup of it says what is wrong with it, and list() reports it.
 */
import { segment } from '../common/api-object';
import { CniCode, CniError, err, type Result } from '../cni/errors';
import { type NadConfigSource, type NetworkDefinition, parseNad } from '../networks/nad';
import type { NetworkReader, NetworkSource } from '../networks/source';
import { type KubeApiClient } from './api-client';
import { type ApiObject, Informer } from './informer';

const PATH = '/apis/k8s.cni.cncf.io/v1/network-attachment-definitions';

const keyOf = (obj: ApiObject): string => `${obj.metadata?.namespace ?? 'default'}/${obj.metadata?.name ?? ''}`;

export class ApiNetworkSource implements NetworkSource, NetworkReader {
  private readonly byKey = new Map<string, Result<NetworkDefinition>>();
  private readonly informer: Informer<ApiObject>;

  constructor(
    private readonly client: KubeApiClient,
    /** Where NADs with an empty spec.config find their CNI config on the node (--cni-conf-dir). */
    private readonly configs?: NadConfigSource,
    onError: (message: string) => void = () => undefined,
  ) {
    // Each NAD is kept parsed (byKey); the informer keeps only its metadata.
    this.informer = new Informer<ApiObject>(
      client,
      PATH,
      'network-attachment-definitions',
      {},
      (obj) => ({ metadata: { ...obj.metadata } }),
      {
        upsert: (obj) => this.put(obj),
        remove: (obj) => this.byKey.delete(keyOf(obj)),
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
    this.byKey.set(keyOf(obj), parseNad(obj, `NetworkAttachmentDefinition ${keyOf(obj)} in the API`, this.configs));
  }

  get(namespace: string, name: string): Result<NetworkDefinition> {
    return this.byKey.get(`${namespace}/${name}`) ?? err(notDefined(namespace, name, this.informer.ready));
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
    if (got.ok) return parseNad(got.value, where, this.configs);
    return got.error.status === 404 ? err(notDefined(namespace, name, true)) : cached;
  }

  list(): { networks: NetworkDefinition[]; errors: CniError[] } {
    const networks: NetworkDefinition[] = [];
    const errors: CniError[] = [];
    for (const r of this.byKey.values()) {
      if (r.ok) networks.push(r.value);
      else errors.push(r.error);
    }
    return { networks, errors };
  }
}

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
