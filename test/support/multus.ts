/**
 * The real Multus (v4.3.0, from ../shared/multus or $PLEXUS_MULTUS_BIN: a directory of plain or .xz binaries), for
 * tests of moving a node off it. An .xz binary is decompressed once into a cache under the temp directory.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ROOT } from './daemon';
import type { KubeApiFixture } from './k8s';
import { DEBIAN_PLUGINS, referencePluginDir } from './plugin-dir';

const multusDir = (): string => process.env.PLEXUS_MULTUS_BIN ?? resolve(ROOT, '../shared/multus');

/** The path of a Multus binary (multus, multus-shim, multus-daemon); undefined when it is nowhere. */
export function multusBinary(name: 'multus' | 'multus-shim' | 'multus-daemon'): string | undefined {
  const plain = join(multusDir(), name);
  if (existsSync(plain)) return plain;
  const packed = `${plain}.xz`;
  if (!existsSync(packed)) return undefined;
  const st = statSync(packed);
  const cached = join(tmpdir(), 'plexus-multus-bin', `${name}-${st.size}-${Math.floor(st.mtimeMs)}`);
  if (!existsSync(cached)) {
    mkdirSync(join(tmpdir(), 'plexus-multus-bin'), { recursive: true });
    const partial = `${cached}.${process.pid}.partial`;
    writeFileSync(partial, execFileSync('xz', ['-dc', packed], { maxBuffer: 256 << 20 }), { mode: 0o755 });
    renameSync(partial, cached);
  }
  return cached;
}

/**
 * A runtime's CNI plugin directory for a Multus node, made at `binDir`: Debian's reference plugins (Multus's delegates)
 * and the thin `multus` binary. Throws when Multus is nowhere (multusMissing says why).
 */
export function multusPluginDir(binDir: string, referencePlugins = DEBIAN_PLUGINS): void {
  const multus = multusBinary('multus');
  if (multus === undefined) throw new Error(`Multus ${multusMissing() ?? 'is missing'}`);
  referencePluginDir(binDir, referencePlugins);
  copyFileSync(multus, join(binDir, 'multus'));
}

/** Why the Multus tests cannot run here, or undefined. */
export function multusMissing(): string | undefined {
  return multusBinary('multus')
    ? undefined
    : `not available: multus (in $PLEXUS_MULTUS_BIN or ${multusDir()}, plain or .xz)`;
}

/** What the runtime ran: Multus's config, the sandbox and the result Multus printed. */
export interface RuntimeCall {
  readonly config: { readonly name: string };
  readonly containerId: string;
  readonly ifname: string;
  readonly netns: string;
  readonly cniArgs: string;
  readonly result: string;
}

/**
 * The record a runtime's libcni writes once its call to Multus succeeded (`<cacheDir>/results/<network>-<container>-
 * <ifname>`, as libcni's cacheAdd writes it): what names the network a sandbox was made under.
 */
export function writeRuntimeRecord(cacheDir: string, call: RuntimeCall): string {
  const dir = join(cacheDir, 'results');
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${call.config.name}-${call.containerId}-${call.ifname}`);
  const record = {
    kind: 'cniCacheV1',
    containerId: call.containerId,
    config: Buffer.from(JSON.stringify(call.config)).toString('base64'),
    ifName: call.ifname,
    networkName: call.config.name,
    netns: call.netns,
    cniArgs: call.cniArgs.split(';').map((kv) => kv.split('=')),
    result: JSON.parse(call.result) as unknown,
  };
  writeFileSync(path, JSON.stringify(record));
  return path;
}

/** What multus-daemon needs from the API on every node: its service account's token and the API's CA. */
export interface MultusAccess {
  readonly token: string;
  readonly caFile: string;
}

async function created(api: KubeApiFixture, path: string, body: Record<string, unknown>): Promise<void> {
  const r = await api.request('POST', path, body);
  if (r.status !== 201 && r.status !== 409) throw new Error(`POST ${path}: ${r.status} ${JSON.stringify(r.body)}`);
}

/** Multus's service account in kube-system with the rules of its DaemonSet's ClusterRole; answers its token. */
export async function grantMultus(api: KubeApiFixture): Promise<MultusAccess> {
  const rbac = '/apis/rbac.authorization.k8s.io/v1';
  await created(api, '/api/v1/namespaces/kube-system/serviceaccounts', {
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: { name: 'multus' },
  });
  await created(api, `${rbac}/clusterroles`, {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: { name: 'multus' },
    rules: [
      { apiGroups: ['k8s.cni.cncf.io'], resources: ['*'], verbs: ['*'] },
      { apiGroups: [''], resources: ['pods', 'pods/status'], verbs: ['get', 'list', 'update', 'watch'] },
      { apiGroups: ['', 'events.k8s.io'], resources: ['events'], verbs: ['create', 'patch', 'update'] },
    ],
  });
  await created(api, `${rbac}/clusterrolebindings`, {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: 'multus' },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'multus' },
    subjects: [{ kind: 'ServiceAccount', name: 'multus', namespace: 'kube-system' }],
  });
  const token = await api.request('POST', '/api/v1/namespaces/kube-system/serviceaccounts/multus/token', {
    apiVersion: 'authentication.k8s.io/v1',
    kind: 'TokenRequest',
    spec: { expirationSeconds: 3600 },
  });
  if (token.status !== 201) throw new Error(`multus's token: ${token.status} ${JSON.stringify(token.body)}`);
  const tokenText = (token.body as { status: { token: string } }).status.token;
  return { token: tokenText, caFile: join(api.dir, 'certs', 'ca.crt') };
}
