/**
 * Namespace isolation (Multus's namespaceIsolation): with it on, a pod may use only the NetworkAttachmentDefinitions
 * of its own namespace, of "default" (always shared, as in Multus) and of the configured global namespaces. What the
 * node's operator configures (the cluster default network, --default-networks) is not the pod's choice and is not
 * checked; what the pod's annotations ask for is.
 */
import { CniCode, CniError } from '../cni/errors';

export interface IsolationSettings {
  /** --namespace-isolation */
  readonly namespaceIsolation?: boolean;
  /** --global-namespaces: namespaces whose networks every pod may use under isolation ("default" always is). */
  readonly globalNamespaces?: readonly string[];
}

/** Why a pod of `podNamespace` may not use network `namespace/name`, or undefined when it may. */
export function isolationProblem(settings: IsolationSettings, podNamespace: string, network: { namespace: string; name: string }, who: string): CniError | undefined {
  if (!settings.namespaceIsolation || network.namespace === podNamespace) return undefined;
  const shared = ['default', ...(settings.globalNamespaces ?? [])];
  if (shared.includes(network.namespace)) return undefined;
  return new CniError(
    CniCode.InvalidNetworkConfig,
    `${who}: network ${network.namespace}/${network.name} is in namespace ${network.namespace}, and namespace isolation is on (--namespace-isolation): pods of ${podNamespace} may use only networks of ${podNamespace} and of the global namespaces (${[...new Set(shared)].join(', ')})`,
    `create the NetworkAttachmentDefinition in ${podNamespace}, or ask the node's operator to add ${network.namespace} to --global-namespaces`,
  );
}
