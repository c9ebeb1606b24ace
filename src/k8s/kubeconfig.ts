/**
 * How plexusd reaches the Kubernetes API: a kubeconfig file (--kubeconfig), else the pod's service account when it
 * runs in a cluster, else not at all (standalone: NADs from --networks-dir, annotations from the runtime).
 */
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { KubeConfig } from '@kubernetes/client-node';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';

const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

export function loadKubeConfig(path: string | undefined, env: NodeJS.ProcessEnv = process.env): Result<KubeConfig | undefined> {
  const kc = new KubeConfig();
  try {
    if (path !== undefined) kc.loadFromFile(path);
    else if (env.KUBERNETES_SERVICE_HOST && existsSync(SERVICE_ACCOUNT_TOKEN)) kc.loadFromCluster();
    else return ok(undefined);
  } catch (e) {
    return err(new CniError(CniCode.InvalidNetworkConfig, `cannot load the kubeconfig ${path ?? '(in-cluster)'}: ${(e as Error).message}`));
  }
  if (!kc.getCurrentCluster()) return err(new CniError(CniCode.InvalidNetworkConfig, `the kubeconfig ${path ?? '(in-cluster)'} names no current cluster`));
  return ok(kc);
}

/** The node this daemon serves: --node-name, else NODE_NAME (the DaemonSet's downward API), else the host name. */
export const nodeNameOf = (flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string => flag ?? env.NODE_NAME ?? hostname();
