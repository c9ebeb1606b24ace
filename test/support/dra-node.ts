/**
 * What the DRA tests and the DRA benchmark share on a real node: whether the node can run DRA at all, the
 * manifests of deploy/ for driver plexus.io (DeviceClasses, the plexus-dra role), ResourceClaimTemplates and pods
 * that claim a host device, and the YAML examples of docs/dra.md, which the tests apply as written.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { ROOT } from './daemon';
import { k8sBinary, PLEXUS_USER } from './k8s';
import { PAUSE_IMAGE } from './kube-node';
import { singleNodeMissing, type SingleNode } from './cluster/single-node';
import type { DaemonSettings } from './daemon-flags';

export const RESOURCE_API = '/apis/resource.k8s.io/v1';

/** Why a DRA node cannot run here: a single-node cluster's needs (its scheduler and controller-manager among them). */
export const draNodeMissing = (): string | undefined => singleNodeMissing();

/** DRA on an older Kubernetes (before 1.34): the reason to skip. */
export function draTooOld(): string | undefined {
  const version = execFileSync(k8sBinary('kubelet')!, ['--version'], { encoding: 'utf8' });
  const minor = Number(/v1\.(\d+)\./.exec(version)?.[1] ?? 0);
  return minor < 34
    ? `DRA (resource.k8s.io/v1) needs Kubernetes 1.34 or later; the kubelet is ${version.trim()}`
    : undefined;
}

/** The DRA manifest of deploy/ (deploy/dra/ once it moved there). */
export const draManifest = (): string =>
  ['deploy/dra/50-dra.yaml', 'deploy/50-dra.yaml'].map((f) => join(ROOT, f)).find((f) => existsSync(f)) ??
  'deploy/dra/50-dra.yaml';

const PATHS: Record<string, (ns: string) => string> = {
  DeviceClass: () => `${RESOURCE_API}/deviceclasses`,
  ResourceClaimTemplate: (ns) => `${RESOURCE_API}/namespaces/${ns}/resourceclaimtemplates`,
  ResourceClaim: (ns) => `${RESOURCE_API}/namespaces/${ns}/resourceclaims`,
  ClusterRole: () => '/apis/rbac.authorization.k8s.io/v1/clusterroles',
  ClusterRoleBinding: () => '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings',
  NetworkAttachmentDefinition: (ns) => `/apis/k8s.cni.cncf.io/v1/namespaces/${ns}/network-attachment-definitions`,
  Pod: (ns) => `/api/v1/namespaces/${ns}/pods`,
  ServiceAccount: (ns) => `/api/v1/namespaces/${ns}/serviceaccounts`,
};

interface ApiObject {
  kind: string;
  metadata: { name: string; namespace?: string };
}

/** What creating objects needs: a node fixture's API calls, or the cluster's (test/support/cluster/). */
export type ApiCaller = Pick<SingleNode, 'call'>;

/**
 * Creates an object (a 409 is fine: already there); throws with the API's answer otherwise. A pod's namespace gets its
 * sa/default first: the controller-manager makes it a moment after the namespace, and the ServiceAccount admission
 * refuses a pod created before ("serviceaccount default not found").
 */
export async function create(node: ApiCaller, object: unknown): Promise<void> {
  const o = object as ApiObject;
  if (o.kind === 'Pod') {
    const namespace = o.metadata.namespace ?? 'default';
    await create(node, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'default', namespace } });
  }
  const path = PATHS[o.kind];
  if (!path) throw new Error(`no API path for kind ${o.kind}`);
  const r = await node.call('POST', path(o.metadata.namespace ?? 'default'), object);
  if (r.status !== 201 && r.status !== 409)
    throw new Error(`POST ${o.kind} ${o.metadata.name}: ${r.status} ${JSON.stringify(r.body).slice(0, 400)}`);
}

/** deploy/'s DRA manifest as written, its role also bound to the test's plexusd user. */
export async function installDra(node: ApiCaller): Promise<void> {
  for (const doc of parseAllDocuments(readFileSync(draManifest(), 'utf8'))) await create(node, doc.toJSON());
  await create(node, {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: 'plexus-dra-user' },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'plexus-dra' },
    subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: PLEXUS_USER }],
  });
}

/**
 * The node's own network when plexus-cni is not its CNI (plexusd only prepares claims): the reference bridge plugin on
 * `bridge`, host-local addresses of a random /24 kept under the node's directory.
 */
export const bridgeConfList =
  (bridge: string) =>
  (dir: string): string => {
    const subnet = `10.${100 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}`;
    const ipam = { type: 'host-local', ranges: [[{ subnet: `${subnet}.0/24` }]], dataDir: join(dir, 'cni-data') };
    return JSON.stringify({
      cniVersion: '1.0.0',
      name: 'podnet',
      plugins: [{ type: 'bridge', bridge, isGateway: false, ipMasq: false, ipam }],
    });
  };

/** A pod's events as `reason: message`. */
export async function podEvents(node: SingleNode, namespace: string, name: string): Promise<string[]> {
  const selector = encodeURIComponent(`involvedObject.name=${name}`);
  const r = await node.call('GET', `/api/v1/namespaces/${namespace}/events?fieldSelector=${selector}`);
  const items = (r.body as { items?: { reason: string; message: string }[] }).items ?? [];
  return items.map((e) => `${e.reason}: ${e.message}`);
}

/** How often plexusd has logged its registration with the kubelet as the DRA driver plexus.io (--log-level info). */
export const draRegistrations = (daemon: { readonly stderr: string }): number =>
  daemon.stderr.split('registered with the kubelet as a DRA driver').length - 1;

/**
 * plexusd's settings on a DRA node, for a plexusd inside the node (DaemonFixture.launcher = node.launcher): the API as
 * the plexus user through the relay the node reaches, the resources file `<work>/resources.yaml` as device
 * plugins and DRA devices, device-info files in `<work>/devinfo`, the kubelet's pod-resources socket and root dir,
 * the node's CDI directory, and the delegated plugins' directory when given.
 */
export const draSettings = (node: SingleNode, work: string, binDir?: string): DaemonSettings => ({
  kubeconfig: node.nodeKubeconfig(PLEXUS_USER),
  nodeName: node.nodeName,
  cniBinDir: binDir,
  devicePluginConfig: join(work, 'resources.yaml'),
  deviceInfoDir: join(work, 'devinfo'),
  podResourcesSocket: join(node.kubeletRoot, 'pod-resources', 'kubelet.sock'),
  dra: true,
  kubeletRootDir: node.kubeletRoot,
  // The node's own CDI directory (its /run/cdi, the one its containerd reads), as the host reaches it.
  cdiDir: node.cdiDir,
});

/**
 * The objects of the YAML block of docs/dra.md that follows `<!-- example: NAME -->`, as written, except that a pod
 * runs the node's local pause image (no registry here) and stops at once.
 */
export function docExample(name: string): ApiObject[] {
  const doc = readFileSync(join(ROOT, 'docs/dra.md'), 'utf8');
  const block = new RegExp(`<!-- example: ${name} -->\\s*\`\`\`yaml\\n([\\s\\S]*?)\`\`\``).exec(doc)?.[1];
  if (!block) throw new Error(`docs/dra.md has no example ${name}`);
  return parseAllDocuments(block).map((d) => {
    const o = d.toJSON() as ApiObject & {
      spec?: { containers?: Record<string, unknown>[]; terminationGracePeriodSeconds?: number };
    };
    if (o.kind === 'Pod' && o.spec) {
      o.spec.terminationGracePeriodSeconds = 1;
      for (const c of o.spec.containers ?? []) Object.assign(c, { image: PAUSE_IMAGE, imagePullPolicy: 'Never' });
    }
    return o;
  });
}

/** A ResourceClaimTemplate of one host device, chosen by a CEL expression, with this plexus.io opaque config. */
export const hostDeviceTemplate = (namespace: string, name: string, cel: string, parameters: unknown): unknown => ({
  apiVersion: 'resource.k8s.io/v1',
  kind: 'ResourceClaimTemplate',
  metadata: { name, namespace },
  spec: { spec: claimSpec(cel, parameters) },
});

/** A claim's spec: one request `nic` of class host-device.plexus.io, with the opaque config. */
export const claimSpec = (cel: string, parameters: unknown): unknown => ({
  devices: {
    requests: [
      { name: 'nic', exactly: { deviceClassName: 'host-device.plexus.io', selectors: [{ cel: { expression: cel } }] } },
    ],
    config: [{ requests: ['nic'], opaque: { driver: 'plexus.io', parameters } }],
  },
});

/** A pod the scheduler places (a pod with claims must not set spec.nodeName), claiming `nic` from a template or a claim. */
export const claimingPod = (
  namespace: string,
  name: string,
  from: { template: string } | { claim: string },
  annotations: Record<string, string> = {},
): unknown => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace, annotations },
  spec: {
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    terminationGracePeriodSeconds: 1,
    resourceClaims: [
      {
        name: 'nic',
        ...('template' in from ? { resourceClaimTemplateName: from.template } : { resourceClaimName: from.claim }),
      },
    ],
    containers: [{ name: 'c', image: PAUSE_IMAGE, imagePullPolicy: 'Never', resources: { claims: [{ name: 'nic' }] } }],
  },
});

/** A pod like claimingPod, but its device comes from the device plugin (resources.limits) and its network from the annotation. */
export const devicePluginPod = (namespace: string, name: string, resource: string, network: string): unknown => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace, annotations: { 'k8s.v1.cni.cncf.io/networks': network } },
  spec: {
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    terminationGracePeriodSeconds: 1,
    containers: [
      { name: 'c', image: PAUSE_IMAGE, imagePullPolicy: 'Never', resources: { limits: { [resource]: '1' } } },
    ],
  },
});
