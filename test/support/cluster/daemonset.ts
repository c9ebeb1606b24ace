/**
 * deploy/'s DaemonSet on the test cluster, from the image: scripts/image.sh's archive (imported into every node by
 * TestCluster.importImage), deploy/ as written (one set of host paths for every node: each node's mount namespace
 * binds its own directories over them, node-namespaces.ts), changed only where a harness must: the API server is the
 * host relay (KUBERNETES_SERVICE_HOST/PORT), since the cluster has no Service proxy. Applied and deleted with kubectl,
 * as an operator does; the rollout read from the DaemonSet's status and its pods.
 */
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parseAllDocuments, stringify } from 'yaml';
import { ROOT } from '../daemon';
import { type KubeApiFixture, kubectlBinary } from '../k8s';

/** The image deploy/ names (package.json's version). */
export const DEPLOYED_IMAGE = 'local.test/plexus:0.1.0';
/** The image the DaemonSet is upgraded to: the same build under another version and tag. */
export const NEXT_VERSION = '0.1.1-upgrade';
export const NEXT_IMAGE = `local.test/plexus:${NEXT_VERSION}`;

/** Builds the image from this checkout's build (dist/, bin/) under `version`'s tag; resolves to the archive's path. */
export async function buildImageArchive(outDir: string, version?: string): Promise<string> {
  const { stdout } = await promisify(execFile)('bash', [join(ROOT, 'scripts/image.sh'), '--out', outDir], {
    encoding: 'utf8',
    env: { ...process.env, PLEXUS_IMAGE_SKIP_BUILD: '1', ...(version ? { PLEXUS_IMAGE_VERSION: version } : {}) },
    maxBuffer: 16 << 20,
  });
  return stdout.trim().split('\n').at(-1)!;
}

/** kubectl as the cluster's admin; answers its output, throws with it on failure. */
export function kubectl(api: KubeApiFixture, args: readonly string[]): string {
  const bin = kubectlBinary();
  if (!bin) throw new Error('no kubectl (../shared/k8s or $PLEXUS_K8S_BIN)');
  try {
    return execFileSync(bin, ['--kubeconfig', api.kubeconfig, ...args], { encoding: 'utf8', stdio: 'pipe' });
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string };
    throw new Error(`kubectl ${args.join(' ')}: ${err.stderr ?? ''}${err.stdout ?? ''}`, { cause: e });
  }
}

interface PlexusDaemonSet {
  kind: 'DaemonSet';
  spec: { template: { spec: { containers: { name: string; env?: unknown[] }[] } } };
}

/**
 * deploy/'s RBAC, ConfigMap and DaemonSet written into `dir` (for `kubectl apply -f dir`), plexusd given the API
 * relay as its in-cluster API server; answers `dir`.
 */
export function clusterManifests(dir: string, relay: { readonly host: string; readonly port: number }): string {
  mkdirSync(dir, { recursive: true });
  for (const file of ['10-rbac.yaml', '30-configmap.yaml', '40-daemonset.yaml']) {
    const docs = parseAllDocuments(readFileSync(join(ROOT, 'deploy', file), 'utf8')).map((d) => d.toJSON() as object);
    for (const doc of docs) {
      if ((doc as { kind?: string }).kind !== 'DaemonSet') continue;
      const plexusd = (doc as PlexusDaemonSet).spec.template.spec.containers.find((c) => c.name === 'plexusd')!;
      plexusd.env = [
        ...(plexusd.env ?? []),
        { name: 'KUBERNETES_SERVICE_HOST', value: relay.host },
        { name: 'KUBERNETES_SERVICE_PORT', value: String(relay.port) },
      ];
    }
    writeFileSync(join(dir, file), docs.map((d) => stringify(d)).join('---\n'));
  }
  return dir;
}

/** One pod of a DaemonSet as the API has it. */
export interface DaemonPod {
  readonly name: string;
  readonly node: string;
  readonly ready: boolean;
  readonly deleting: boolean;
  /** Its init containers' images, then its containers'. */
  readonly images: string[];
}

interface ApiDaemonPod {
  metadata: { name: string; deletionTimestamp?: string };
  spec: { nodeName?: string; initContainers?: { image: string }[]; containers: { image: string }[] };
  status?: { conditions?: { type: string; status: string }[] };
}

/** The pods of kube-system labelled app.kubernetes.io/name=`app`. */
export async function daemonPods(api: KubeApiFixture, app: string): Promise<DaemonPod[]> {
  const selector = encodeURIComponent(`app.kubernetes.io/name=${app}`);
  const r = await api.request('GET', `/api/v1/namespaces/kube-system/pods?labelSelector=${selector}`);
  if (r.status !== 200) throw new Error(`listing the pods of ${app}: ${r.status}`);
  return ((r.body as { items: ApiDaemonPod[] }).items ?? []).map((p) => ({
    name: p.metadata.name,
    node: p.spec.nodeName ?? '',
    deleting: p.metadata.deletionTimestamp !== undefined,
    ready: (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'),
    images: [...(p.spec.initContainers ?? []), ...p.spec.containers].map((c) => c.image),
  }));
}

/**
 * Whether DaemonSet `name`'s current generation runs Ready on `nodes` nodes, every container from `image`, with no
 * old pod left; answers what is not yet so, or undefined once it is.
 */
export async function rolloutPending(
  api: KubeApiFixture,
  name: string,
  nodes: number,
  image: string,
): Promise<string | undefined> {
  const r = await api.request('GET', `/apis/apps/v1/namespaces/kube-system/daemonsets/${name}`);
  if (r.status !== 200) return `daemonset ${name}: ${r.status}`;
  const ds = r.body as {
    metadata: { generation: number; labels?: Record<string, string> };
    status?: { observedGeneration?: number; numberReady?: number; updatedNumberScheduled?: number };
  };
  const s = ds.status ?? {};
  const pods = await daemonPods(api, ds.metadata.labels?.['app.kubernetes.io/name'] ?? name);
  const current =
    (s.observedGeneration ?? 0) >= ds.metadata.generation &&
    s.numberReady === nodes &&
    s.updatedNumberScheduled === nodes &&
    pods.length === nodes &&
    pods.every((p) => p.ready && !p.deleting && p.images.every((i) => i === image));
  return current ? undefined : `${JSON.stringify(s)} pods ${JSON.stringify(pods)}`;
}
