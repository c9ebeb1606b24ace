/**
 * Namespace isolation (Multus's namespaceIsolation): with it on, a pod may use only the NetworkAttachmentDefinitions
 * of its own namespace, of "default" (always shared, as in Multus) and of the configured global namespaces. What the
 * node's operator configures (the cluster default network, --default-networks) is not the pod's choice and is not
 * checked; what the pod's annotations ask for is.
 */
import type { CniError } from '../cni/errors';
import { isolatedNetwork } from './errors';

export interface IsolationSettings {
  /** --namespace-isolation */
  readonly namespaceIsolation?: boolean;
  /** --global-namespaces: namespaces whose networks every pod may use under isolation ("default" always is). */
  readonly globalNamespaces?: readonly string[];
}

/** Why a pod of `podNamespace` may not use network `namespace/name`, or undefined when it may. */
export function isolationProblem(
  settings: IsolationSettings,
  podNamespace: string,
  network: { namespace: string; name: string },
  who: string,
): CniError | undefined {
  if (!settings.namespaceIsolation || network.namespace === podNamespace) return undefined;
  const shared = ['default', ...(settings.globalNamespaces ?? [])];
  if (shared.includes(network.namespace)) return undefined;
  return isolatedNetwork(who, network, podNamespace, shared);
}
