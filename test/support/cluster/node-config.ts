/**
 * The configuration files of one node of the test cluster: containerd's (config version 3 for containerd 2,
 * version 2 for 1.6; ../shared/k8s/NOTES.md sections 3, 11 and 12), the kubelet's and plexusd's. Every path a node owns is under its root directory; the few
 * paths a program hard-codes are bound over in the node's mount namespace (node-namespaces.ts).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { ROOT } from '../daemon';
import { PAUSE_IMAGE } from '../kube-node';
import { kubeletConfigBase } from '../kubelet-config';

/** Where one node keeps everything, under its root directory. */
export class NodePaths {
  constructor(readonly root: string) {}
  get containerdSocket(): string {
    return join(this.root, 'run', 'containerd', 'containerd.sock');
  }
  get cniConfDir(): string {
    return join(this.root, 'etc', 'cni', 'net.d');
  }
  get cniBinDir(): string {
    return join(this.root, 'opt', 'cni', 'bin');
  }
  get plexusState(): string {
    return join(this.root, 'var', 'lib', 'plexus');
  }
  get plexusSocket(): string {
    return join(this.root, 'run', 'plexus', 'plexus.sock');
  }
  get certs(): string {
    return join(this.root, 'certs');
  }
  /** The node's /run/cdi, where containerd 2 reads CDI specs and plexusd writes them. */
  get cdiDir(): string {
    return join(this.root, 'run', 'cdi');
  }
  /** The kubelet's staticPodPath. */
  get staticPodDir(): string {
    return join(this.root, 'etc', 'manifests');
  }
  log(name: string): string {
    return join(this.root, 'log', `${name}.log`);
  }
  etc(name: string): string {
    return join(this.root, 'etc', name);
  }
}

/** What containerd's config of one node says beyond its paths. */
export interface RuntimeChoice {
  /** containerd's major version: 2 reads config version 3, 1.6 version 2 (../shared/k8s/NOTES.md section 11). */
  readonly major: number;
  /** The runtime's CNI plugin directory (default: the node's /opt/cni/bin). */
  readonly cniBinDir?: string;
}

/**
 * containerd's config for a node: root, state, socket and runc's root its own; CNI from the node's dirs; CDI (on in
 * containerd 2) read from the node's /run/cdi only. Config version 3 for containerd 2, version 2 for 1.6.
 */
export function containerdConfig(paths: NodePaths, runtime: RuntimeChoice = { major: 2 }): string {
  const d = (p: string): string => JSON.stringify(join(paths.root, p)); // TOML basic strings accept JSON's escapes
  const binDir = JSON.stringify(runtime.cniBinDir ?? paths.cniBinDir);
  const common = [
    `root = ${d('var/lib/containerd')}`,
    `state = ${d('run/containerd')}`,
    '[grpc]',
    `  address = ${JSON.stringify(paths.containerdSocket)}`,
    '[ttrpc]',
    `  address = ${JSON.stringify(`${paths.containerdSocket}.ttrpc`)}`,
  ];
  if (runtime.major < 2) return containerd16Config(paths, common, binDir);
  const runtimeTable = "[plugins.'io.containerd.cri.v1.runtime'";
  return [
    'version = 3',
    ...common,
    "[plugins.'io.containerd.internal.v1.opt']",
    `  path = ${d('opt/containerd')}`,
    "[plugins.'io.containerd.nri.v1.nri']",
    `  socket_path = ${d('run/nri.sock')}`,
    "[plugins.'io.containerd.cri.v1.images']",
    '  snapshotter = "overlayfs"',
    "  [plugins.'io.containerd.cri.v1.images'.pinned_images]",
    `    sandbox = "${PAUSE_IMAGE}"`,
    `${runtimeTable}]`,
    // Without CAP_SYS_RESOURCE a negative oom_score_adj is refused and every sandbox fails (NOTES.md section 3).
    '  restrict_oom_score_adj = true',
    '  enable_cdi = true',
    `  cdi_spec_dirs = [${JSON.stringify(paths.cdiDir)}]`,
    `  ${runtimeTable}.containerd]`,
    '    default_runtime_name = "runc"',
    `    ${runtimeTable}.containerd.runtimes.runc]`,
    '      runtime_type = "io.containerd.runc.v2"',
    `      ${runtimeTable}.containerd.runtimes.runc.options]`,
    '        SystemdCgroup = false',
    `        Root = ${d('run/runc')}`,
    `  ${runtimeTable}.cni]`,
    `    bin_dirs = [${binDir}]`,
    `    conf_dir = ${JSON.stringify(paths.cniConfDir)}`,
    '    max_conf_num = 1',
    "[plugins.'io.containerd.grpc.v1.cri']",
    '  stream_server_address = "127.0.0.1"',
    '  stream_server_port = "0"',
    '',
  ].join('\n');
}

/** containerd 1.6's form (config version 2: one CRI plugin; no CDI). */
function containerd16Config(paths: NodePaths, common: readonly string[], binDir: string): string {
  const d = (p: string): string => JSON.stringify(join(paths.root, p));
  const cri = '[plugins."io.containerd.grpc.v1.cri"';
  return [
    'version = 2',
    ...common,
    '[plugins."io.containerd.internal.v1.opt"]',
    `  path = ${d('opt/containerd')}`,
    `${cri}]`,
    `  sandbox_image = "${PAUSE_IMAGE}"`,
    '  restrict_oom_score_adj = true',
    '  stream_server_address = "127.0.0.1"',
    '  stream_server_port = "0"',
    `  ${cri}.containerd]`,
    '    snapshotter = "overlayfs"',
    '    default_runtime_name = "runc"',
    `    ${cri}.containerd.runtimes.runc]`,
    '      runtime_type = "io.containerd.runc.v2"',
    `      ${cri}.containerd.runtimes.runc.options]`,
    '        SystemdCgroup = false',
    `        Root = ${d('run/runc')}`,
    `  ${cri}.cni]`,
    `    bin_dir = ${binDir}`,
    `    conf_dir = ${JSON.stringify(paths.cniConfDir)}`,
    '    max_conf_num = 1',
    '',
  ].join('\n');
}

export interface KubeletIdentity {
  readonly nodeName: string;
  readonly nodeIp: string;
  /** The API's CA, which signs the clients the kubelet lets in. */
  readonly clientCa: string;
}

/** The kubelet's config file: served on the node's uplink address, its own cgroup root (cgroup v1, NOTES.md 12). */
export function kubeletConfig(paths: NodePaths, node: KubeletIdentity): unknown {
  return {
    ...kubeletConfigBase({
      address: node.nodeIp,
      clientCa: node.clientCa,
      certsDir: paths.certs,
      containerdSocket: paths.containerdSocket,
      podLogsDir: join(paths.root, 'var', 'log', 'pods'),
    }),
    cgroupRoot: `/${node.nodeName}`,
    staticPodPath: paths.staticPodDir,
    // A killed node's pods are seen gone sooner (the node controller's grace counts from the last update).
    nodeStatusUpdateFrequency: '4s',
  };
}

/** Cluster IPAM's timing, as plexusd's flags name it (docs/ipam.md), and how soon gone pods' leases are swept. */
export interface IpamTiming {
  readonly nodeLeaseSeconds?: number;
  readonly ipamNodeGraceSeconds?: number;
  readonly ipamReconcileSeconds?: number;
  readonly orphanSweepSeconds?: number;
}

/**
 * plexusd's config file as the DaemonSet mounts it (deploy/30-configmap.yaml), every host path moved under the node's
 * root, with the API's kubeconfig (the DaemonSet's service account) and the settings a test asks for (cluster IPAM
 * timing, DRA).
 */
export function plexusdConfig(
  paths: NodePaths,
  kubeconfig: string,
  asked: Readonly<Record<string, unknown>>,
): Record<string, unknown> {
  const manifest = parseYaml(readFileSync(join(ROOT, 'deploy', '30-configmap.yaml'), 'utf8')) as {
    data: { 'plexusd.yaml': string };
  };
  const settings = parseYaml(manifest.data['plexusd.yaml']) as Record<string, unknown>;
  const moved = Object.entries(settings).map(([key, value]): [string, unknown] => [
    key,
    typeof value === 'string' && value.startsWith('/') ? join(paths.root, value) : value,
  ]);
  return { ...Object.fromEntries(moved), kubeconfig, ...asked };
}

/**
 * A kubeconfig for a process inside a node: the API through the host relay on the uplink bridge, its certificate
 * checked for "localhost" (the name the API server's certificate carries), as NOTES.md section 12 says.
 */
export function writeNodeKubeconfig(from: string, to: string, server: string): void {
  const config = JSON.parse(readFileSync(from, 'utf8')) as { clusters: { cluster: Record<string, unknown> }[] };
  for (const c of config.clusters) Object.assign(c.cluster, { server, 'tls-server-name': 'localhost' });
  writeFileSync(to, JSON.stringify(config), { mode: 0o600 });
}
