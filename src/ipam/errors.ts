/** Errors of an IPAM request that no backend of this node can serve: named builders, one message each. */
import { CniCode, CniError } from '../cni/errors';

/** Claims keep addresses only where the cluster store keeps them: a node-local (host-local) or static pool cannot. */
export const claimNeedsClusterPool = (network: string, type: string): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `network ${network} has ipam type "${type}", which cannot honour an ipam-claim-reference: ` +
      'addresses follow a claim only in cluster pools (ipam type "plexus" or "whereabouts")',
  );

/** A cluster pool on a node that has no API connection. */
export const clusterNeedsApi = (network: string, flavour: string): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `ipam type "${flavour}" allocates cluster-wide on the Kubernetes API: ` +
      `plexusd needs --kubeconfig (or its service account) for network ${network}`,
  );
