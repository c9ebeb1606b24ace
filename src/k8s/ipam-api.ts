/** Cluster IPAM's port to the API (src/ipam/cluster/api-port.ts) on the daemon's client and informers. */
import type { ClusterApi } from '../ipam/cluster/api-port';
import type { KubeApiClient } from './api-client';
import { Informer } from './informer';

export function clusterIpamApi(client: KubeApiClient): ClusterApi {
  return {
    request: (method, path, resource, options) => client.request(method, path, resource, options),
    // Whole objects are kept: a block's claim entries are what cluster IPAM reads of it.
    watch: (path, resource, handlers) => new Informer(client, path, resource, {}, (obj) => obj, handlers),
  };
}
