/**
 * plexusd configuration: command-line flags, optionally a config file (YAML or JSON, same keys in camelCase).
 * Flags win over the file. Everything is validated here once; the rest of the daemon trusts the types.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { absolutePath } from '../common/absolute-path';
import { errorMessage } from '../common/error-message';
import { INSTALL_CNI_VERSIONS } from '../install/runtime-cni-version';

const bool = z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]);
// An empty string must not coerce to 0: "--max-queued=" is a mistake, not a request for zero.
const emptyIsNaN = (v: unknown): unknown => (v === '' ? Number.NaN : v);
const int = (min: number, max: number) => z.preprocess(emptyIsNaN, z.coerce.number().int().min(min).max(max));
/** A number of seconds or a rate. */
const decimal = (min: number, max: number) => z.preprocess(emptyIsNaN, z.coerce.number().min(min).max(max));
/** A list of names: an array in the file, comma-separated on the command line. */
const nameList = () =>
  z
    .union([
      z.array(z.string().min(1)),
      z.string().transform((v) =>
        v
          .split(',')
          .map((x) => x.trim())
          .filter(Boolean),
      ),
    ])
    .default([]);

export const DaemonConfigSchema = z
  .object({
    socket: absolutePath().default('/run/plexus/plexus.sock'),
    stateDir: absolutePath().default('/var/lib/plexus'),
    networksDir: absolutePath().default('/etc/plexus/networks.d'),
    defaultNetwork: z.string().min(1).optional(),
    cniBinDir: absolutePath().default('/opt/cni/bin'),
    cniConfDir: absolutePath().default('/etc/cni/net.d'),
    naming: z.enum(['multus', 'eth']).default('multus'),
    selectionAnnotation: bool.default(true),
    defaultNetworks: nameList(),
    maxConcurrent: int(1, 1024).default(16),
    delegateShare: int(1, 1024).default(8),
    maxDelegateExecs: int(1, 1024).default(32),
    kernelThreads: int(1, 8).default(1),
    maxQueued: int(0, 100000).default(1024),
    stateSync: bool.default(false),
    hostLinkGroup: int(1, 2 ** 31 - 1).optional(),
    kubeconfig: absolutePath().optional(),
    nodeName: z.string().min(1).max(253).optional(),
    kubeApiQps: decimal(0.1, 10000).default(50),
    kubeApiBurst: int(1, 10000).default(100),
    kubeApiTimeout: decimal(0.1, 600).default(10),
    ipamReconcileSeconds: decimal(0.1, 86400).default(30),
    ipamNodeGraceSeconds: decimal(0, 86400 * 30).default(600),
    nodeLeaseSeconds: int(1, 3600).default(40),
    namespaceIsolation: bool.default(false),
    hotPlug: bool.default(true),
    globalNamespaces: nameList(),
    systemNamespaces: nameList(),
    readinessIndicatorFile: absolutePath().optional(),
    auxiliaryChain: absolutePath().optional(),
    takeOverMultus: bool.default(false),
    importedConfig: absolutePath().optional(),
    multusCacheDir: absolutePath().optional(),
    runtimeCniCacheDir: absolutePath().optional(),
    hostLocalDataDir: absolutePath().default('/var/lib/cni/networks'),
    maxInterfacesPerPod: int(1, 4096).default(32),
    maxAnnotationBytes: int(64, 262144).default(32768),
    maxNodeAttachments: int(1, 1_000_000).default(8192),
    drainSeconds: decimal(0, 3600).default(20),
    spoolScanSeconds: decimal(0.1, 3600).default(5),
    installCniConfig: absolutePath().optional(),
    installCniVersion: z.enum(INSTALL_CNI_VERSIONS).default('auto'),
    memoryCeilingMib: int(32, 1_048_576).optional(),
    metricsAddress: z
      .string()
      .regex(/^(\[[0-9a-fA-F:.]+\]|[^:\s]+):\d{1,5}$/, 'must be host:port')
      .optional(),
    devicePluginConfig: absolutePath().optional(),
    devicePluginDir: absolutePath().default('/var/lib/kubelet/device-plugins'),
    // Optional rather than defaulted (absent: off, /var/lib/kubelet), so configs written before DRA compare equal.
    dra: bool.optional(),
    kubeletRootDir: absolutePath().optional(),
    cdiDir: absolutePath().optional(),
    podResourcesSocket: absolutePath().default('/var/lib/kubelet/pod-resources/kubelet.sock'),
    deviceInfoDir: absolutePath().default('/var/run/k8s.cni.cncf.io/devinfo'),
    ovsdbSocket: absolutePath().default('/var/run/openvswitch/db.sock'),
    orphanSweepSeconds: decimal(0, 86400).default(60),
    switchResyncSeconds: decimal(1, 3600).default(10),
    logLevel: z.enum(['silent', 'fatal', 'error', 'warn', 'info', 'debug', 'trace']).default('info'),
  })
  .strict();
export type DaemonConfig = z.infer<typeof DaemonConfigSchema>;

/** Every flag plexusd takes (besides --config and --help), and the setting each one sets. */
export const FLAGS: Record<string, keyof DaemonConfig> = {
  '--socket': 'socket',
  '--state-dir': 'stateDir',
  '--networks-dir': 'networksDir',
  '--default-network': 'defaultNetwork',
  '--cni-bin-dir': 'cniBinDir',
  '--cni-conf-dir': 'cniConfDir',
  '--naming': 'naming',
  '--selection-annotation': 'selectionAnnotation',
  '--default-networks': 'defaultNetworks',
  '--max-concurrent': 'maxConcurrent',
  '--system-namespaces': 'systemNamespaces',
  '--readiness-indicator-file': 'readinessIndicatorFile',
  '--auxiliary-chain': 'auxiliaryChain',
  '--take-over-multus': 'takeOverMultus',
  '--imported-config': 'importedConfig',
  '--multus-cache-dir': 'multusCacheDir',
  '--runtime-cni-cache-dir': 'runtimeCniCacheDir',
  '--host-local-data-dir': 'hostLocalDataDir',
  '--delegate-share': 'delegateShare',
  '--max-delegate-execs': 'maxDelegateExecs',
  '--kernel-threads': 'kernelThreads',
  '--max-queued': 'maxQueued',
  '--state-sync': 'stateSync',
  '--host-link-group': 'hostLinkGroup',
  '--spool-scan-seconds': 'spoolScanSeconds',
  '--drain-seconds': 'drainSeconds',
  '--kubeconfig': 'kubeconfig',
  '--node-name': 'nodeName',
  '--kube-api-qps': 'kubeApiQps',
  '--kube-api-burst': 'kubeApiBurst',
  '--kube-api-timeout': 'kubeApiTimeout',
  '--ipam-reconcile-seconds': 'ipamReconcileSeconds',
  '--ipam-node-grace-seconds': 'ipamNodeGraceSeconds',
  '--node-lease-seconds': 'nodeLeaseSeconds',
  '--namespace-isolation': 'namespaceIsolation',
  '--hot-plug': 'hotPlug',
  '--global-namespaces': 'globalNamespaces',
  '--max-interfaces-per-pod': 'maxInterfacesPerPod',
  '--max-annotation-bytes': 'maxAnnotationBytes',
  '--max-node-attachments': 'maxNodeAttachments',
  '--log-level': 'logLevel',
  '--device-plugin-config': 'devicePluginConfig',
  '--device-plugin-dir': 'devicePluginDir',
  '--pod-resources-socket': 'podResourcesSocket',
  '--dra': 'dra',
  '--kubelet-root-dir': 'kubeletRootDir',
  '--cdi-dir': 'cdiDir',
  '--device-info-dir': 'deviceInfoDir',
  '--ovsdb-socket': 'ovsdbSocket',
  '--switch-resync-seconds': 'switchResyncSeconds',
  '--orphan-sweep-seconds': 'orphanSweepSeconds',
  '--install-cni-config': 'installCniConfig',
  '--install-cni-version': 'installCniVersion',
  '--metrics-address': 'metricsAddress',
  '--memory-ceiling-mib': 'memoryCeilingMib',
};

export const USAGE = `usage: plexusd [--config FILE] [flags]
  --socket PATH             unix socket plexus-cni talks to (default /run/plexus/plexus.sock)
  --state-dir DIR           journal and IPAM leases (default /var/lib/plexus)
  --networks-dir DIR        NetworkAttachmentDefinition files, YAML or JSON (default /etc/plexus/networks.d)
  --default-network REF     the network every pod gets as eth0: a NAD [namespace/]name (namespace "default"), or the
                            absolute path of a CNI config file on the node; a pod may override it with the
                            v1.multus-cni.io/default-network annotation
  --cni-bin-dir DIR         where delegated CNI plugins live (default /opt/cni/bin)
  --cni-conf-dir DIR        CNI config files for NADs with an empty spec.config or a config id (default /etc/cni/net.d)
  --naming SCHEME           names of additional interfaces: multus (net1, net2, ...) or eth (eth1, eth2, ...)
  --selection-annotation B  read the pod's k8s.v1.cni.cncf.io/networks annotation (default true)
  --default-networks LIST   comma-separated [namespace/]name[@ifname] networks every pod also gets
  --max-concurrent N        CNI calls handled at once (default 16); a call waiting on a delegated plugin does not count
  --delegate-share N        plugins of one delegated network run at once (default 8)
  --max-delegate-execs N    delegated plugins run at once on the node (default 32)
  --kernel-threads N        threads that make kernel calls, 1-8 (default 1)
  --max-queued N            CNI calls that may wait; more are answered "try again later" (default 1024)
  --state-sync BOOL         fsync journal steps and IPAM leases (default false: see docs/configuration.md)
  --host-link-group N       put host-side links in this link group
  --kubeconfig PATH         the Kubernetes API: NADs, pods, network-status, events (default: the service account in
                            a cluster, else none: a standalone node)
  --node-name NAME          this node's name in the API (default: $NODE_NAME, then the host name)
  --kube-api-qps N          API requests per second once the burst is spent (default 50)
  --kube-api-burst N        API requests that may go at once (default 100)
  --kube-api-timeout S      how long one API request may take (default 10)
  --ipam-reconcile-seconds S  how often cluster IPAM returns empty blocks and reclaims deleted nodes' (default 30)
  --ipam-node-grace-seconds S  how long a node must be dead (no Node object and its plexus-node-<node> Lease
                            expired) before its IPAM blocks are reclaimed (default 600)
  --node-lease-seconds S    the duration of this node's Lease, renewed every third of it (default 40)
  --namespace-isolation B   pods may use only NADs of their own namespace and the global ones (default false)
  --global-namespaces LIST  comma-separated namespaces whose NADs every pod may use ("default" always may)
  --system-namespaces LIST  comma-separated namespaces whose pods do not get --default-networks (default: none)
  --readiness-indicator-file PATH  ADD answers "try again later" while this file does not exist (default: none)
  --auxiliary-chain DIR     the .conf files of DIR run as a chain after every pod's networks (Multus's
                            auxiliaryCNIChainName; the chain's name is DIR's) (default: none)
  --multus-cache-dir DIR    Multus's per-sandbox cache (its cniDir): the DEL of a sandbox Multus made is run as
                            Multus would have run it (default: none; plexus-install sets it on a Multus node)
  --runtime-cni-cache-dir DIR  the runtime's libcni cache: its record of each call to Multus names the network a
                            sandbox Multus made was made under, which a CNI GC must name to remove it
                            (default /var/lib/cni, libcni's, as containerd and CRI-O use it)
  --host-local-data-dir DIR  the reference host-local's dataDir for networks whose config names none: native
                            host-local leases are held there too (default /var/lib/cni/networks)
  --take-over-multus B      once ready, move Multus's CNI config aside so the runtime calls Plexus; plexus-install
                            uninstall puts it back (default false: docs/migrate-from-multus.md)
  --hot-plug B              change running pods' networks when their networks annotation changes (default true)
  --orphan-sweep-seconds S  with an API: how often attachments of pods that are gone (network namespace removed and
                            no pod of that UID on this node) are removed without a DEL; 0: never (default 60)
  --max-interfaces-per-pod N  interfaces one pod may have, default network included (default 32)
  --max-annotation-bytes N  size of a pod's k8s.v1.cni.cncf.io/networks annotation (default 32768)
  --max-node-attachments N  pod interfaces plexusd holds on this node at once (default 8192)
  --drain-seconds S         on SIGTERM, the budget of the whole stop: calls, teardowns, plugins (default 20)
  --spool-scan-seconds S    how often to replay DELs spooled by plexus-cni while the daemon was away (default 5)
  --install-cni-config PATH  once ready, write Plexus's conflist for the runtime here (write-then-rename), e.g.
                            /etc/cni/net.d/00-plexus.conflist
  --install-cni-version V   that conflist's cniVersion: auto (the highest the node's runtime reads, as its Node
                            reports it; unknown: the --default-network file's, else 1.0.0) or 0.3.0-1.1.0 (default auto)
  --metrics-address HOST:PORT  also serve Prometheus /metrics (and /healthz, /readyz) over TCP here (default: off;
                            /metrics is always on the socket)
  --memory-ceiling-mib N    the TCP /healthz fails (a liveness probe restarts plexusd, draining) above this RSS
  --device-plugin-config FILE  resources to offer the kubelet as device plugins (plexus.io/memif, host-device
                            pools): see docs/device-plugin.md (default: none)
  --device-plugin-dir DIR   where the kubelet takes device plugins' registrations (default /var/lib/kubelet/device-plugins)
  --pod-resources-socket PATH  the kubelet's pod-resources API: <kubelet --root-dir>/pod-resources/kubelet.sock
                            (default /var/lib/kubelet/pod-resources/kubelet.sock)
  --dra B                   offer the resources whose "offer" names dra as DRA devices of driver plexus.io (needs the
                            API and --device-plugin-config): docs/dra.md (default false)
  --kubelet-root-dir DIR    the kubelet's --root-dir: DRA sockets go in plugins_registry/ and plugins/ under it
                            (default /var/lib/kubelet)
  --cdi-dir DIR             where DRA writes a CDI spec per prepared memif claim; one of the runtime's CDI spec dirs
                            (default /var/run/cdi)
  --device-info-dir DIR     NPWG device-info files (default /var/run/k8s.cni.cncf.io/devinfo)
  --ovsdb-socket PATH       the userspace switch's database, for memif networks without "ovsdbSocket"
                            (default /var/run/openvswitch/db.sock)
  --switch-resync-seconds S  how often memif ports the journal holds are checked on the switch and made again
                            if it lost them (also on every reconnection to its database; default 10)
  --log-level LEVEL         silent, fatal, error, warn, info, debug, trace (default info)
  --config FILE             read the same settings (camelCase keys) from a YAML/JSON file
  --imported-config FILE    settings plexus-install carried over from Multus, over those of --config (absent: none)
  --help                    this text`;

export type ConfigOutcome =
  { kind: 'config'; config: DaemonConfig } | { kind: 'help' } | { kind: 'error'; message: string };

/** Every flag takes a value; --help none. Parsed leniently so each mistake gets a message naming the flag. */
const PARSE_OPTIONS = {
  ...Object.fromEntries(
    [...Object.keys(FLAGS), '--config'].map((flag) => [flag.slice(2), { type: 'string' as const }]),
  ),
  help: { type: 'boolean' as const, short: 'h' },
};

export function loadDaemonConfig(argv: readonly string[]): ConfigOutcome {
  const fromFlags: Record<string, string> = {};
  let file: string | undefined;
  const { tokens } = parseArgs({
    args: [...argv],
    options: PARSE_OPTIONS,
    strict: false,
    allowPositionals: true,
    tokens: true,
  });
  if (tokens.some((t) => t.kind === 'option' && t.name === 'help')) return { kind: 'help' };
  for (const token of tokens) {
    if (token.kind !== 'option') {
      const text = token.kind === 'positional' ? token.value : '--';
      return { kind: 'error', message: `unknown flag ${text.split('=')[0]}` };
    }
    const flag = token.rawName;
    if (flag !== '--config' && !Object.hasOwn(FLAGS, flag)) return { kind: 'error', message: `unknown flag ${flag}` };
    // Lenient parsing takes the next word as the value even when it is a flag: "--socket --log-level debug".
    if (typeof token.value !== 'string' || (!token.inlineValue && token.value.startsWith('--')))
      return { kind: 'error', message: `${flag} needs a value` };
    if (flag === '--config') {
      if (token.value === '') return { kind: 'error', message: '--config needs a file path' };
      file = token.value;
    } else fromFlags[FLAGS[flag]!] = token.value;
  }
  const fromFile = file === undefined ? { settings: {} } : readSettingsFile(file, false);
  if ('error' in fromFile) return { kind: 'error', message: fromFile.error };
  // Settings plexus-install carried over from Multus: over the config file's, under the flags. Absent: none.
  const importedPath = fromFlags.importedConfig ?? fromFile.settings.importedConfig;
  const imported =
    typeof importedPath === 'string' && importedPath.startsWith('/')
      ? readSettingsFile(importedPath, true)
      : { settings: {} };
  if ('error' in imported) return { kind: 'error', message: imported.error };
  if ('importedConfig' in imported.settings)
    return { kind: 'error', message: `${String(importedPath)}: an imported config may not import another` };
  const r = DaemonConfigSchema.safeParse({ ...fromFile.settings, ...imported.settings, ...fromFlags });
  if (!r.success) {
    const issue = r.error.issues[0];
    const unknownKey = issue?.code === 'unrecognized_keys' ? issue.keys.join(', ') : undefined;
    if (unknownKey)
      return {
        kind: 'error',
        message: `unknown setting ${unknownKey} in ${[file, importedPath].filter(Boolean).join(' or ') || 'the configuration'}`,
      };
    const key = issue?.path.join('.') ?? '';
    const flag = Object.entries(FLAGS).find(([, k]) => k === key)?.[0];
    return {
      kind: 'error',
      message: `invalid setting ${flag ?? key}${flag ? ` (${key})` : ''}: ${issue?.message ?? 'invalid'}`,
    };
  }
  return { kind: 'config', config: r.data };
}

/** A YAML or JSON mapping of settings; `optional`: a file that does not exist holds none. */
function readSettingsFile(file: string, optional: boolean): { settings: Record<string, unknown> } | { error: string } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    if (optional && (e as NodeJS.ErrnoException).code === 'ENOENT') return { settings: {} };
    return { error: `cannot read config file ${file}: ${errorMessage(e)}` };
  }
  try {
    const parsed = parseYaml(text) as unknown;
    if (parsed !== null && (typeof parsed !== 'object' || Array.isArray(parsed)))
      return { error: `${file}: must be a mapping of settings` };
    return { settings: (parsed ?? {}) as Record<string, unknown> };
  } catch (e) {
    return { error: `cannot read config file ${file}: ${errorMessage(e)}` };
  }
}
