/**
 * A real single-node Kubernetes for tests and benchmarks: the API server and etcd of KubeApiFixture, a containerd with
 * its CRI plugin and the kubelet of ../shared/k8s, the pair $PLEXUS_STACK picks (stack.ts: 1.36 on containerd 2 by
 * default, 1.35 on Debian's containerd 1.6), wired as ../shared/k8s/NOTES.md (sections 3-11) describes.
 * Everything lives under one temporary root: containerd's root, state, socket and network namespaces, the CNI config
 * (a private conf_dir, so /etc/cni/net.d is never written), the kubelet's --root-dir and pod logs. The few host paths
 * the kubelet hard-codes are moved aside before it starts and put back by stop(), as are the kernel settings it
 * changes; the kubelet's fixed ports 10250 and 10248 must be free. Every process is stopped by the PID it was given.
 * (Were the test process killed outright, a path moved aside stays beside the original as `<path>.plexus-aside-<hex>`.)
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  cpSync,
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  rmdirSync,
  writeFileSync,
} from 'node:fs';
import { connect as http2Connect, constants as http2Constants } from 'node:http2';
import { request as httpsRequest } from 'node:https';
import { connect as netConnect, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, delimiter, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { issueCert, writeKubeconfig } from './certs';
import { buildPauseImage, containerdBinary, containerdMajor, containerdMissing } from './containerd';
import { acquireInstanceLock, type InstanceLock } from '../../src/node/instance-lock';
import { type ApiReply, k8sBinary, k8sBinaryMissing, k8sMissing, KubeApiFixture } from './k8s';
import { kubeletConfigBase } from './kubelet-config';

export const KUBELET_PORT = 10250;
export const KUBELET_HEALTHZ_PORT = 10248;
export const PAUSE_IMAGE = 'local.test/pause:1';

const which = (name: string): string | undefined =>
  [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/sbin']
    .map((d) => join(d, name))
    .find((p) => existsSync(p));
const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** TCP ports some socket listens on (IPv4 and IPv6), read from /proc: synchronous, so a skip reason can use it. */
function listeningPorts(): Set<number> {
  const ports = new Set<number>();
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/);
      if (state === '0A' && local) ports.add(parseInt(local.split(':').pop() ?? '', 16)); // 0A: LISTEN
    }
  }
  return ports;
}

/** Why the kubelet's fixed ports cannot be had, or undefined. */
function portsTaken(): string | undefined {
  const listening = listeningPorts();
  const taken = [KUBELET_PORT, KUBELET_HEALTHZ_PORT].filter((p) => listening.has(p));
  return taken.length
    ? `port ${taken.join(' and ')} already in use on this machine (another kubelet?): the kubelet's ports are fixed`
    : undefined;
}

/** Why a real node cannot run here, or undefined when it can. */
export function kubeNodeMissing(): string | undefined {
  if (process.getuid?.() !== 0) return 'a kubelet and containerd need root';
  const api = k8sMissing();
  if (api) return api;
  const runtime = containerdMissing();
  if (runtime) return runtime;
  if (!which('ip')) return 'not installed: iproute2 (ip)';
  return k8sBinaryMissing('kubelet');
}

/** Where nodes of this project's test runs take turns: the kubelet's ports and host paths are one per machine. */
/**
 * Debugging a node: PLEXUS_KUBELET_VERBOSITY=N runs the kubelet at --v=N (its pod workers' steps show from 4), and
 * PLEXUS_KEEP_NODE_LOGS=DIR copies the node's logs (kubelet, containerd, and the controller-manager and scheduler
 * when it runs them) into DIR/plexus-node-…-<time> at stop.
 */
function kubeletVerbosity(): string[] {
  const v = process.env.PLEXUS_KUBELET_VERBOSITY;
  if (v === undefined || v === '') return [];
  if (!/^\d$/.test(v)) throw new Error(`PLEXUS_KUBELET_VERBOSITY is a level from 0 to 9, not ${JSON.stringify(v)}`);
  return [`--v=${v}`];
}

function keepLogs(from: string, to: string): void {
  const into = join(to, `${basename(from.replace(/\/log$/, ''))}-${new Date().toISOString().replace(/[:.]/g, '')}`);
  cpSync(from, into, { recursive: true });
}

const NODE_LOCK_DIR = join(tmpdir(), 'plexus-kube-node-lock');
/** The reference host-local plugin's default dataDir, and plexusd's (--host-local-data-dir). */
export const HOST_LOCAL_DATA_DIR = '/var/lib/cni/networks';

export interface KubeNodeOptions {
  /** The CNI conflist (JSON text) containerd uses for every pod; a function receives the node's temp root (for host-local's dataDir). */
  readonly cniConfList: string | ((root: string) => string);
  /** containerd's CNI bin_dir. */
  readonly cniBinDir: string;
  /** Host links the node's networks create besides the conflist's bridges (deleted by stop() if they are there then). */
  readonly ownedLinks?: readonly string[];
  readonly extraApiArgs?: never;
  /**
   * Also run kube-controller-manager and kube-scheduler (default false: pods are bound with spec.nodeName). DRA needs
   * both: the controller-manager makes claims from ResourceClaimTemplates, the scheduler allocates them. They run as
   * the admin, with their HTTPS ports off (--secure-port=0), so they take no fixed port.
   */
  readonly controlPlane?: boolean;
}

export interface CreatePodsOptions {
  readonly namespace?: string;
  readonly annotations?: Readonly<Record<string, string>>;
  readonly namePrefix?: string;
  /** Pods created at once (default 10). */
  readonly concurrency?: number;
  /** The container's resources.limits (e.g. extended resources of device plugins: { 'plexus.io/memif': '1' }). */
  readonly limits?: Readonly<Record<string, string>>;
}

export interface RunningTimings {
  readonly pods: number;
  /** From the first create request to the last pod seen Running. */
  readonly totalMs: number;
  /** From the first create request to the last one answered, and to the first pod seen Running. */
  readonly createMs: number;
  readonly firstRunningMs: number;
  /** Each pod's create request to its first Running event, in the order of the names asked for. */
  readonly perPodMs: readonly number[];
  readonly p50Ms: number;
  readonly p95Ms: number;
  /** FailedCreatePodSandBox events (a sandbox the kubelet had to retry) in the pods' namespaces. */
  readonly sandboxFailures: number;
  readonly failureMessages: readonly string[];
}

/** Nearest-rank percentile. */
export const percentile = (samples: readonly number[], p: number): number => {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
};

export interface StopHooks {
  /**
   * Runs once containerd is gone (no CNI call can come any more) and before the API server stops: the place to stop a
   * CNI daemon that watches the API (the API server takes its full 10 s SIGTERM grace while such watches are open).
   */
  readonly runtimeStopped?: () => Promise<unknown>;
}

interface Started {
  readonly name: string;
  readonly proc: ChildProcess;
  readonly exited: Promise<void>;
}

interface PodRecord {
  createdAt?: number;
  acceptedAt?: number;
  runningAt?: number;
  phase?: string;
}

export interface Sandbox {
  readonly id: string;
  readonly name: string;
  readonly namespace: string;
  readonly uid: string;
  readonly ready: boolean;
}

export class KubeNodeFixture {
  readonly nodeName = '127.0.0.1';
  readonly containerdSocket: string;
  readonly cniConfDir: string;
  readonly kubeletRoot: string;
  readonly kubeletLog: string;
  readonly containerdLog: string;
  /** The CDI spec directory containerd 2 reads (CDI on); containerd 1.6 has no CDI. */
  readonly cdiDir: string;
  private apiFixture: KubeApiFixture | undefined;
  private readonly procs: Started[] = [];
  /** This node's turn among the project's nodes on this machine (see start). */
  private turn: InstanceLock | undefined;
  private readonly host = new HostPaths();
  private readonly cgroups = new KubeCgroups();
  private readonly sysctls = new KernelSettings([
    'vm/overcommit_memory',
    'vm/panic_on_oom',
    'kernel/panic',
    'kernel/panic_on_oops',
    'kernel/keys/root_maxkeys',
    'kernel/keys/root_maxbytes',
  ]);
  private readonly links: { name: string; existed: boolean }[] = [];
  private readonly pods = new Map<string, PodRecord>();
  private readonly watches = new Map<string, () => void>();
  private readonly reserved: Server[] = [];
  private stopped: Promise<string[]> | undefined;

  private constructor(readonly dir: string) {
    this.containerdSocket = join(dir, 'run', 'containerd', 'containerd.sock');
    this.cniConfDir = join(dir, 'etc', 'cni', 'net.d');
    this.kubeletRoot = join(dir, 'var', 'lib', 'kubelet');
    this.kubeletLog = join(dir, 'log', 'kubelet.log');
    this.containerdLog = join(dir, 'log', 'containerd.log');
    this.cdiDir = join(dir, 'etc', 'cdi');
  }

  /** The node's API server (and etcd). */
  get api(): KubeApiFixture {
    if (!this.apiFixture) throw new Error('the node has no API server (start() failed before it)');
    return this.apiFixture;
  }

  /**
   * Starts a node. Another node of this project (a parallel test run, a benchmark) is waited for: they take turns on
   * a lock. Ports held by anything else are an error that names them.
   */
  static async start(options: KubeNodeOptions): Promise<KubeNodeFixture> {
    mkdirSync(NODE_LOCK_DIR, { recursive: true });
    const turn = await acquireInstanceLock(NODE_LOCK_DIR, () => undefined, 200);
    const taken = portsTaken();
    if (taken) {
      turn.release();
      throw new Error(taken);
    }
    const fx = new KubeNodeFixture(mkdtempSync(join(tmpdir(), 'plexus-node-')));
    fx.turn = turn;
    try {
      // Held until the kubelet starts: a second node (another test run) sees them taken before it touches the host.
      await fx.reservePorts();
      for (const d of ['certs', 'etc', 'log', 'run/containerd', 'var/lib', 'var/log/pods'])
        mkdirSync(join(fx.dir, d), { recursive: true });
      mkdirSync(fx.cniConfDir, { recursive: true });
      const conflist = typeof options.cniConfList === 'string' ? options.cniConfList : options.cniConfList(fx.dir);
      const parsed = JSON.parse(conflist) as { plugins?: { type?: string; bridge?: string }[] };
      const bridges = (parsed.plugins ?? []).filter((p) => p.type === 'bridge').map((p) => p.bridge ?? 'cni0');
      for (const name of [...bridges, ...(options.ownedLinks ?? [])])
        fx.links.push({ name, existed: linkExists(name) });
      writeFileSync(join(fx.cniConfDir, '10-test.conflist'), conflist);

      fx.apiFixture = await KubeApiFixture.start();
      if (options.controlPlane) fx.startControlPlane();
      fx.issueNodeCerts();
      fx.host.watchDirs(['/run/containerd/s']); // the shims' sockets: a path containerd 1.6 hard-codes
      await fx.startContainerd(options.cniBinDir);
      fx.importPause();

      // libcni caches results in /var/lib/cni; util-linux's mount keeps /run/mount (not configurable either).
      fx.host.watchDirs(['/var/lib/cni/results', '/run/mount']);
      // host-local's default dataDir, where plexusd (--host-local-data-dir) and the reference plugin keep leases.
      fx.host.keepTree(HOST_LOCAL_DATA_DIR);
      fx.host.claim(['/var/lib/kubelet/device-plugins', '/var/lib/kubelet/pod-resources']);
      fx.host.claimLinkDir('/var/log/containers', fx.dir);
      fx.cgroups.record();
      fx.sysctls.record();
      await fx.startKubelet();
      await fx.waitNodeReady(60000);
      return fx;
    } catch (e) {
      const problems = await fx.stop();
      throw new Error(
        `${message(e)}${problems.length ? `\n(clean-up after the failed start: ${problems.join('; ')})` : ''}`,
        { cause: e },
      );
    }
  }

  // -- start ---------------------------------------------------------------------------------------------------------

  private async reservePorts(): Promise<void> {
    for (const port of [KUBELET_PORT, KUBELET_HEALTHZ_PORT]) {
      const server = createServer();
      await new Promise<void>((done, fail) => {
        server.once('error', (e: NodeJS.ErrnoException) =>
          fail(
            e.code === 'EADDRINUSE'
              ? new Error(`port ${port} already in use (another kubelet?): the kubelet's ports are fixed`)
              : e,
          ),
        );
        server.listen(port, '127.0.0.1', () => done());
      });
      this.reserved.push(server);
    }
  }

  private async releasePorts(): Promise<void> {
    await Promise.all(this.reserved.splice(0).map((s) => new Promise<void>((r) => s.close(() => r()))));
  }

  private adminTls(): { ca: Buffer; cert: Buffer; key: Buffer } {
    const certs = join(this.api.dir, 'certs');
    return {
      ca: readFileSync(join(certs, 'ca.crt')),
      cert: readFileSync(join(certs, 'admin.crt')),
      key: readFileSync(join(certs, 'admin.key')),
    };
  }

  /** The kubelet's client identity (the Node authorizer's system:node:<name>) and its serving cert for :10250, from the API's CA. */
  private issueNodeCerts(): void {
    const dir = join(this.dir, 'certs');
    const caDir = join(this.api.dir, 'certs');
    const ca = { cert: join(caDir, 'ca.crt'), key: join(caDir, 'ca.key') };
    issueCert(dir, ca, 'kubelet-client', `/O=system:nodes/CN=system:node:${this.nodeName}`, 'clientAuth');
    issueCert(dir, ca, 'kubelet-server', `/CN=${this.nodeName}`, 'serverAuth', `IP:${this.nodeName},DNS:localhost`);
    writeKubeconfig(
      join(this.dir, 'etc', 'kubelet.kubeconfig'),
      this.api.server,
      ca.cert,
      join(dir, 'kubelet-client.crt'),
      join(dir, 'kubelet-client.key'),
    );
  }

  /** kube-controller-manager and kube-scheduler (NOTES.md section 2), as the admin, no serving port. */
  private startControlPlane(): void {
    const certs = join(this.api.dir, 'certs');
    const kubeconfig = this.api.kubeconfig;
    this.spawn(
      'kube-controller-manager',
      k8sBinary('kube-controller-manager')!,
      [
        `--kubeconfig=${kubeconfig}`,
        '--secure-port=0',
        '--leader-elect=false',
        '--use-service-account-credentials=false',
        `--service-account-private-key-file=${join(certs, 'sa.key')}`,
        `--root-ca-file=${join(certs, 'ca.crt')}`,
        '--controllers=*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller',
      ],
      join(this.dir, 'log', 'kube-controller-manager.log'),
    );
    this.spawn(
      'kube-scheduler',
      k8sBinary('kube-scheduler')!,
      [`--kubeconfig=${kubeconfig}`, '--secure-port=0', '--leader-elect=false'],
      join(this.dir, 'log', 'kube-scheduler.log'),
    );
  }

  private async startContainerd(cniBinDir: string): Promise<void> {
    const d = (p: string): string => JSON.stringify(join(this.dir, p)); // TOML basic strings accept JSON's escapes
    const config = join(this.dir, 'etc', 'containerd.toml');
    mkdirSync(this.cdiDir, { recursive: true }); // there before containerd watches it
    writeFileSync(
      config,
      containerdMajor() >= 2
        ? this.containerdConfigV3(cniBinDir)
        : [
            'version = 2',
            ...this.containerdPaths(),
            '[plugins."io.containerd.grpc.v1.cri"]',
            `  sandbox_image = "${PAUSE_IMAGE}"`,
            // Without CAP_SYS_RESOURCE a negative oom_score_adj is refused and every sandbox fails (NOTES.md section 3).
            '  restrict_oom_score_adj = true',
            // Pods' network namespaces under containerd's state dir, not /var/run/netns: all of it under the temp root.
            '  netns_mounts_under_state_dir = true',
            '  stream_server_address = "127.0.0.1"',
            '  stream_server_port = "0"',
            '  [plugins."io.containerd.grpc.v1.cri".containerd]',
            '    snapshotter = "overlayfs"',
            '    default_runtime_name = "runc"',
            '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
            '      runtime_type = "io.containerd.runc.v2"',
            '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]',
            '        SystemdCgroup = false',
            `        Root = ${d('run/runc')}`,
            '  [plugins."io.containerd.grpc.v1.cri".cni]',
            `    bin_dir = ${JSON.stringify(cniBinDir)}`,
            `    conf_dir = ${JSON.stringify(this.cniConfDir)}`,
            '    max_conf_num = 1',
            '',
          ].join('\n'),
    );
    await this.runContainerd();
  }

  /** Spawns containerd with the config startContainerd wrote and waits until it answers. */
  private async runContainerd(): Promise<void> {
    const config = join(this.dir, 'etc', 'containerd.toml');
    // containerd finds its shim on the PATH: this run's, not Debian's 1.6 one.
    const bin = containerdBinary('containerd')!;
    const env = { ...process.env, PATH: `${dirname(bin)}${delimiter}${process.env.PATH ?? ''}` };
    this.spawn('containerd', bin, ['--config', config], this.containerdLog, env);
    const deadline = Date.now() + 20000;
    while (this.ctr(['version']).status !== 0) {
      if (!this.running('containerd') || Date.now() > deadline)
        throw new Error(`containerd did not start:\n${this.logTail('containerd')}`);
      await sleep(100);
    }
  }

  /** Where containerd keeps everything, under the temp root (both config versions). */
  private containerdPaths(): string[] {
    const d = (p: string): string => JSON.stringify(join(this.dir, p)); // TOML basic strings accept JSON's escapes
    return [
      `root = ${d('var/lib/containerd')}`,
      `state = ${d('run/containerd')}`,
      '[grpc]',
      `  address = ${JSON.stringify(this.containerdSocket)}`,
      '[ttrpc]',
      `  address = ${JSON.stringify(`${this.containerdSocket}.ttrpc`)}`,
      // Its default is /opt/containerd, created at start.
      '[plugins."io.containerd.internal.v1.opt"]',
      `  path = ${d('opt')}`,
    ];
  }

  /**
   * containerd 2's form of the same settings (config version 3: the CRI plugin split into cri.v1.runtime and
   * cri.v1.images, ../shared/k8s/NOTES.md section 11), with CDI on and reading only this node's cdiDir, and NRI's
   * socket under the temp root.
   */
  private containerdConfigV3(cniBinDir: string): string {
    const d = (p: string): string => JSON.stringify(join(this.dir, p));
    const runtime = "[plugins.'io.containerd.cri.v1.runtime'";
    return [
      'version = 3',
      ...this.containerdPaths(),
      "[plugins.'io.containerd.nri.v1.nri']",
      `  socket_path = ${d('run/nri.sock')}`,
      "[plugins.'io.containerd.cri.v1.images']",
      '  snapshotter = "overlayfs"',
      "  [plugins.'io.containerd.cri.v1.images'.pinned_images]",
      `    sandbox = "${PAUSE_IMAGE}"`,
      `${runtime}]`,
      '  restrict_oom_score_adj = true',
      '  netns_mounts_under_state_dir = true',
      '  enable_cdi = true',
      `  cdi_spec_dirs = [${JSON.stringify(this.cdiDir)}]`,
      `  ${runtime}.containerd]`,
      '    default_runtime_name = "runc"',
      `    ${runtime}.containerd.runtimes.runc]`,
      '      runtime_type = "io.containerd.runc.v2"',
      `      ${runtime}.containerd.runtimes.runc.options]`,
      '        SystemdCgroup = false',
      `        Root = ${d('run/runc')}`,
      `  ${runtime}.cni]`,
      `    bin_dirs = [${JSON.stringify(cniBinDir)}]`,
      `    conf_dir = ${JSON.stringify(this.cniConfDir)}`,
      '    max_conf_num = 1',
      "[plugins.'io.containerd.grpc.v1.cri']",
      '  stream_server_address = "127.0.0.1"',
      '  stream_server_port = "0"',
      '',
    ].join('\n');
  }

  /**
   * Stops containerd (SIGTERM) and starts it again with the same config, as an upgrade or a crash of the runtime would:
   * the pods' shims, containers and network namespaces live on, and containerd finds them again at start.
   */
  async restartContainerd(): Promise<void> {
    await this.stopProcess('containerd');
    const old = this.procs.findIndex((s) => s.name === 'containerd');
    if (old >= 0) this.procs.splice(old, 1);
    await this.runContainerd();
    // containerd 1.6 answers ctr before its CRI plugin has loaded the sandboxes ("server is not initialized yet").
    const cri = new CriRuntime(this.containerdSocket);
    const deadline = Date.now() + 20000;
    for (;;) {
      const listed = await cri.listSandboxes().then(
        () => undefined,
        (e: unknown) => message(e),
      );
      if (listed === undefined) return;
      if (Date.now() > deadline) throw new Error(`CRI not serving after the restart: ${listed}`);
      await sleep(100);
    }
  }

  private importPause(): void {
    const archive = buildPauseImage(join(this.dir, 'image'));
    const r = this.ctr(['images', 'import', archive]);
    if (r.status !== 0) throw new Error(`ctr images import: ${r.out}`);
  }

  /** The kubelet's staticPodPath: a manifest written here runs as a static pod, shown in the API as a mirror pod. */
  get staticPodDir(): string {
    return join(this.dir, 'etc', 'manifests');
  }

  /** Runs a static pod (a pause container) from a manifest in staticPodPath; answers its mirror pod's name. */
  writeStaticPod(name: string, annotations: Readonly<Record<string, string>> = {}): string {
    writeFileSync(join(this.staticPodDir, `${name}.json`), JSON.stringify(podObject(name, this.nodeName, annotations)));
    return `${name}-${this.nodeName}`;
  }

  /** Removes a static pod's manifest: the kubelet stops the pod and deletes its mirror pod. */
  removeStaticPod(name: string): void {
    rmSync(join(this.staticPodDir, `${name}.json`), { force: true });
  }

  private async startKubelet(): Promise<void> {
    const certs = join(this.dir, 'certs');
    const config = join(this.dir, 'etc', 'kubelet-config.json'); // JSON is YAML
    mkdirSync(this.staticPodDir, { recursive: true });
    writeFileSync(
      config,
      JSON.stringify({
        ...kubeletConfigBase({
          address: '127.0.0.1',
          clientCa: join(this.api.dir, 'certs', 'ca.crt'),
          certsDir: certs,
          containerdSocket: this.containerdSocket,
          podLogsDir: join(this.dir, 'var', 'log', 'pods'),
        }),
        port: KUBELET_PORT,
        healthzPort: KUBELET_HEALTHZ_PORT,
        staticPodPath: this.staticPodDir,
      }),
    );
    await this.releasePorts();
    this.spawn(
      'kubelet',
      k8sBinary('kubelet')!,
      [
        `--config=${config}`,
        `--kubeconfig=${join(this.dir, 'etc', 'kubelet.kubeconfig')}`,
        `--hostname-override=${this.nodeName}`,
        `--root-dir=${this.kubeletRoot}`,
        `--cert-dir=${join(this.kubeletRoot, 'pki')}`,
        // Else /usr/libexec/kubernetes/kubelet-plugins/volume/exec is created.
        `--volume-plugin-dir=${join(this.dir, 'var', 'lib', 'kubelet-plugins')}`,
        ...kubeletVerbosity(),
      ],
      this.kubeletLog,
    );
  }

  /**
   * Stops the kubelet (SIGTERM) and starts it again with the same configuration, as an upgrade or crash would; pods
   * keep running in containerd. The new kubelet wipes /var/lib/kubelet/device-plugins, so device plugins must
   * register again. Answers when the new kubelet was spawned (Date.now()).
   */
  async restartKubelet(): Promise<number> {
    await this.stopKubelet();
    return this.startKubeletAgain();
  }

  /** Stops the kubelet (SIGTERM) and leaves it stopped, as a crash or an upgrade would; pods keep running. */
  async stopKubelet(): Promise<void> {
    await this.stopProcess('kubelet');
    const old = this.procs.findIndex((s) => s.name === 'kubelet');
    if (old >= 0) this.procs.splice(old, 1);
  }

  /** Starts the kubelet stopKubelet stopped, with the same configuration; answers when it was spawned (Date.now()). */
  async startKubeletAgain(): Promise<number> {
    const spawnedAt = Date.now();
    await this.startKubelet();
    return spawnedAt;
  }

  private async waitNodeReady(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const node = await this.call('GET', `/api/v1/nodes/${this.nodeName}`).catch(() => undefined);
      const conditions =
        (node?.body as { status?: { conditions?: { type: string; status: string; message?: string }[] } } | undefined)
          ?.status?.conditions ?? [];
      if (conditions.some((c) => c.type === 'Ready' && c.status === 'True')) return;
      if (!this.running('kubelet')) throw new Error(`the kubelet exited:\n${this.logTail('kubelet')}`);
      if (Date.now() > deadline) {
        throw new Error(
          `node ${this.nodeName} not Ready after ${timeoutMs} ms (${JSON.stringify(conditions.find((c) => c.type === 'Ready') ?? 'no node object')}):\n${this.logTail('kubelet')}`,
        );
      }
      await sleep(250);
    }
  }

  private spawn(name: string, bin: string, args: readonly string[], logFile: string, env?: NodeJS.ProcessEnv): void {
    const fd = openSync(logFile, 'a');
    const proc = spawn(bin, args, { stdio: ['ignore', fd, fd], ...(env ? { env } : {}) });
    closeSync(fd);
    const exited = new Promise<void>((r) => proc.once('exit', () => r()));
    proc.once('error', () => undefined); // an exec failure shows as an exit
    this.procs.push({ name, proc, exited });
  }

  private running(name: string): boolean {
    const p = this.procs.find((s) => s.name === name)?.proc;
    return p !== undefined && p.exitCode === null && p.signalCode === null;
  }

  /** PIDs of the processes this fixture started that still run. */
  get pids(): Record<string, number> {
    return Object.fromEntries(
      this.procs.filter((s) => this.running(s.name) && s.proc.pid !== undefined).map((s) => [s.name, s.proc.pid!]),
    );
  }

  logTail(name: 'kubelet' | 'containerd' | 'kube-scheduler' | 'kube-controller-manager', lines = 40): string {
    const file =
      name === 'kubelet'
        ? this.kubeletLog
        : name === 'containerd'
          ? this.containerdLog
          : join(this.dir, 'log', `${name}.log`);
    try {
      return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  }

  /** `ctr` against this node's containerd, in the CRI's k8s.io namespace. */
  ctr(args: readonly string[], timeoutMs = 60000): { status: number | null; out: string } {
    const r = spawnSync(
      containerdBinary('ctr')!,
      ['--address', this.containerdSocket, '--namespace', 'k8s.io', ...args],
      {
        encoding: 'utf8',
        timeout: timeoutMs,
      },
    );
    return { status: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
  }

  /** What containerd runs a pod's first container with: its environment (by name) and its mounts. */
  async containerSpec(
    namespace: string,
    name: string,
  ): Promise<{ env: Map<string, string>; mounts: { destination: string; source: string }[] }> {
    const pod = (await this.call('GET', `/api/v1/namespaces/${namespace}/pods/${name}`)).body as {
      status?: { containerStatuses?: { containerID?: string }[] };
    };
    const containerId = pod.status?.containerStatuses?.[0]?.containerID;
    if (!containerId) throw new Error(`pod ${namespace}/${name} has no container yet`);
    const info = this.ctr(['containers', 'info', containerId.replace(/^containerd:\/\//, '')]);
    if (info.status !== 0) throw new Error(`ctr containers info: ${info.out}`);
    const spec = (
      JSON.parse(info.out) as {
        Spec: { process: { env: string[] }; mounts: { destination: string; source: string }[] };
      }
    ).Spec;
    const env = new Map(spec.process.env.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
    return { env, mounts: spec.mounts };
  }

  // -- the API -------------------------------------------------------------------------------------------------------

  /** A request to the API server as the admin (KubeApiFixture.request). */
  call(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<ApiReply> {
    return this.api.request(method, path, body, contentType);
  }

  private async ensureNamespace(namespace: string): Promise<void> {
    if (namespace !== 'default') {
      const ns = await this.call('POST', '/api/v1/namespaces', {
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name: namespace },
      });
      if (ns.status !== 201 && ns.status !== 409)
        throw new Error(`creating namespace ${namespace}: ${ns.status} ${JSON.stringify(ns.body)}`);
    }
    // No controller-manager runs: the ServiceAccount admission wants sa/default to exist.
    const sa = await this.call('POST', `/api/v1/namespaces/${namespace}/serviceaccounts`, {
      apiVersion: 'v1',
      kind: 'ServiceAccount',
      metadata: { name: 'default' },
    });
    if (sa.status !== 201 && sa.status !== 409)
      throw new Error(`creating sa/default in ${namespace}: ${sa.status} ${JSON.stringify(sa.body)}`);
  }

  /**
   * Follows the namespace's pods from now on, noting when each is first seen Running; resolves once the watch is open.
   * (Watching rather than listing: a list of 110 pods every few ms would load the 2 cores being measured.)
   */
  private async watchPods(namespace: string): Promise<void> {
    if (this.watches.has(namespace)) return;
    const list = await this.call('GET', `/api/v1/namespaces/${namespace}/pods?limit=1`);
    const rv = (list.body as { metadata?: { resourceVersion?: string } }).metadata?.resourceVersion;
    if (list.status !== 200 || !rv) throw new Error(`listing pods in ${namespace}: ${list.status}`);
    await new Promise<void>((opened, fail) => {
      const req = httpsRequest(
        {
          host: '127.0.0.1',
          port: this.api.apiPort,
          method: 'GET',
          agent: false,
          ...this.adminTls(),
          path: `/api/v1/namespaces/${namespace}/pods?watch=true&resourceVersion=${rv}&timeoutSeconds=3600`,
        },
        (res) => {
          if (res.statusCode !== 200) return fail(new Error(`watching pods in ${namespace}: ${res.statusCode}`));
          opened();
          let buffered = '';
          res.setEncoding('utf8').on('data', (chunk: string) => {
            buffered += chunk;
            let nl: number;
            while ((nl = buffered.indexOf('\n')) >= 0) {
              const line = buffered.slice(0, nl);
              buffered = buffered.slice(nl + 1);
              if (line.trim()) this.onPodEvent(namespace, line);
            }
          });
          res.on('end', () => this.watches.delete(namespace));
        },
      );
      req.on('error', (e) => {
        this.watches.delete(namespace);
        fail(e);
      });
      this.watches.set(namespace, () => req.destroy());
      req.end();
    });
  }

  private onPodEvent(namespace: string, line: string): void {
    const now = performance.now();
    let event: { type?: string; object?: { metadata?: { name?: string }; status?: { phase?: string } } };
    try {
      event = JSON.parse(line) as typeof event;
    } catch {
      return;
    }
    const name = event.object?.metadata?.name;
    if (!name || event.type === 'DELETED' || event.type === 'ERROR') return;
    const record = this.pods.get(`${namespace}/${name}`) ?? {};
    record.phase = event.object?.status?.phase;
    if (record.phase === 'Running' && record.runningAt === undefined) record.runningAt = now;
    this.pods.set(`${namespace}/${name}`, record);
  }

  /**
   * Creates n pods bound to this node (spec.nodeName), each a pause container with a local image and no token volume,
   * `concurrency` requests at a time; answers their names. Times are kept for waitAllRunning().
   */
  async createPods(n: number, options: CreatePodsOptions = {}): Promise<string[]> {
    const namespace = options.namespace ?? 'default';
    const prefix = options.namePrefix ?? 'pod-';
    await this.ensureNamespace(namespace);
    await this.watchPods(namespace);
    const names = Array.from({ length: n }, (_, i) => `${prefix}${i}`);
    const errors: string[] = [];
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < names.length; i = next++) {
        const name = names[i]!;
        const record = this.pods.get(`${namespace}/${name}`) ?? {};
        record.createdAt = performance.now();
        this.pods.set(`${namespace}/${name}`, record);
        const made = await this.call(
          'POST',
          `/api/v1/namespaces/${namespace}/pods`,
          podObject(name, this.nodeName, options.annotations ?? {}, options.limits),
        );
        if (made.status !== 201) errors.push(`${name}: ${made.status} ${JSON.stringify(made.body).slice(0, 300)}`);
        record.acceptedAt = performance.now();
      }
    };
    await Promise.all(Array.from({ length: Math.min(options.concurrency ?? 10, n) }, worker));
    if (errors.length)
      throw new Error(`creating pods: ${errors.length} refused, e.g. ${errors.slice(0, 3).join('; ')}`);
    return names;
  }

  /** Waits until every named pod (made by createPods) was seen Running; throws with what the stragglers wait for. */
  async waitAllRunning(names: readonly string[], timeoutMs: number, namespace = 'default'): Promise<RunningTimings> {
    const key = (name: string): string => `${namespace}/${name}`;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const pending = names.filter((n) => this.pods.get(key(n))?.runningAt === undefined);
      if (pending.length === 0) break;
      if (!this.watches.has(namespace)) await this.catchUp(namespace, pending); // a watch that ended
      if (Date.now() > deadline || !this.running('kubelet') || !this.running('containerd')) {
        throw new Error(
          `${pending.length} of ${names.length} pods not Running after ${timeoutMs} ms: ${await this.describePods(namespace, pending.slice(0, 5))}\n${this.logTail('kubelet', 15)}`,
        );
      }
      await sleep(50);
    }
    const records = names.map((n) => this.pods.get(key(n))!);
    const perPodMs = records.map((r) => r.runningAt! - r.createdAt!);
    const first = Math.min(...records.map((r) => r.createdAt!));
    const last = Math.max(...records.map((r) => r.runningAt!));
    const failures = await this.sandboxFailures(namespace);
    return {
      pods: names.length,
      totalMs: last - first,
      perPodMs,
      createMs: Math.max(...records.map((r) => r.acceptedAt ?? NaN)) - first,
      firstRunningMs: Math.min(...records.map((r) => r.runningAt!)) - first,
      p50Ms: percentile(perPodMs, 50),
      p95Ms: percentile(perPodMs, 95),
      sandboxFailures: failures.length,
      failureMessages: failures.slice(0, 5),
    };
  }

  private async catchUp(namespace: string, pending: readonly string[]): Promise<void> {
    const list = await this.call('GET', `/api/v1/namespaces/${namespace}/pods`);
    const items = (list.body as { items?: { metadata: { name: string }; status?: { phase?: string } }[] }).items ?? [];
    const now = performance.now();
    for (const pod of items) {
      const record = this.pods.get(`${namespace}/${pod.metadata.name}`);
      if (record && pending.includes(pod.metadata.name) && pod.status?.phase === 'Running') record.runningAt ??= now;
    }
  }

  /** Phase, container waiting reasons and the latest events of some pods: why they are not Running. */
  async describePods(namespace: string, names: readonly string[]): Promise<string> {
    const out: string[] = [];
    const events = await this.call('GET', `/api/v1/namespaces/${namespace}/events`).catch(() => undefined);
    const items =
      (events?.body as { items?: { involvedObject: { name: string }; reason: string; message: string }[] } | undefined)
        ?.items ?? [];
    for (const name of names) {
      const pod = await this.call('GET', `/api/v1/namespaces/${namespace}/pods/${name}`).catch(() => undefined);
      const status = (
        pod?.body as
          | { status?: { phase?: string; containerStatuses?: { state?: { waiting?: { reason?: string } } }[] } }
          | undefined
      )?.status;
      const waiting = (status?.containerStatuses ?? [])
        .map((c) => c.state?.waiting?.reason)
        .filter(Boolean)
        .join(',');
      const last = items
        .filter((e) => e.involvedObject.name === name)
        .slice(-2)
        .map((e) => `${e.reason}: ${e.message.slice(0, 300)}`);
      out.push(
        `${name} ${status?.phase ?? '?'}${waiting ? ` (${waiting})` : ''}${last.length ? ` [${last.join(' | ')}]` : ''}`,
      );
    }
    return out.join('; ');
  }

  /** Messages of the FailedCreatePodSandBox events in a namespace. */
  async sandboxFailures(namespace: string): Promise<string[]> {
    const events = await this.call(
      'GET',
      `/api/v1/namespaces/${namespace}/events?fieldSelector=reason%3DFailedCreatePodSandBox`,
    );
    const items =
      (events.body as { items?: { involvedObject: { name: string }; message: string; count?: number }[] }).items ?? [];
    return items.flatMap((e) => Array.from({ length: e.count ?? 1 }, () => `${e.involvedObject.name}: ${e.message}`));
  }

  /** A pod as the API has it now (metadata, spec, status). */
  async pod(
    namespace: string,
    name: string,
  ): Promise<{
    metadata: { uid: string; annotations?: Record<string, string> };
    status?: { phase?: string; podIP?: string; podIPs?: { ip: string }[] };
  }> {
    const got = await this.call('GET', `/api/v1/namespaces/${namespace}/pods/${name}`);
    if (got.status !== 200) throw new Error(`GET pod ${namespace}/${name}: ${got.status}`);
    return got.body as never;
  }

  /**
   * Deletes every pod of the namespaces createPods used and waits until the API has none left: the kubelet lets a pod
   * go only after it stopped its sandbox, which is when containerd runs CNI DEL. Then waits until CRI reports no ready
   * sandbox. Answers the milliseconds it took.
   */
  async deleteAllPods(timeoutMs = 120000): Promise<number> {
    const started = performance.now();
    const namespaces = [...new Set([...this.pods.keys()].map((k) => k.split('/')[0]!))];
    for (const ns of namespaces) {
      const r = await this.call('DELETE', `/api/v1/namespaces/${ns}/pods`);
      if (r.status !== 200)
        throw new Error(`deleting the pods of ${ns}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
    }
    const deadline = Date.now() + timeoutMs;
    for (const ns of namespaces) {
      for (;;) {
        const list = await this.call('GET', `/api/v1/namespaces/${ns}/pods`);
        const left = ((list.body as { items?: { metadata: { name: string } }[] }).items ?? []).map(
          (p) => p.metadata.name,
        );
        if (left.length === 0) break;
        if (Date.now() > deadline || !this.running('kubelet'))
          throw new Error(
            `${left.length} pods of ${ns} still in the API after ${timeoutMs} ms: ${await this.describePods(ns, left.slice(0, 3))}`,
          );
        await sleep(200);
      }
    }
    for (const key of [...this.pods.keys()]) if (namespaces.includes(key.split('/')[0]!)) this.pods.delete(key);
    const cri = new CriRuntime(this.containerdSocket);
    for (;;) {
      const ready = (await cri.listSandboxes()).filter((s) => s.ready);
      if (ready.length === 0) break;
      if (Date.now() > deadline)
        throw new Error(
          `sandboxes still ready after their pods were deleted: ${ready.map((s) => `${s.namespace}/${s.name}`).join(', ')}`,
        );
      await sleep(200);
    }
    return performance.now() - started;
  }

  // -- CRI -----------------------------------------------------------------------------------------------------------

  /** The pod sandboxes containerd has (ready or not). */
  sandboxes(): Promise<Sandbox[]> {
    return new CriRuntime(this.containerdSocket).listSandboxes();
  }

  /** The network namespace path of a pod's ready sandbox, from CRI PodSandboxStatus (verbose). */
  async podNetns(namespace: string, name: string): Promise<string> {
    const cri = new CriRuntime(this.containerdSocket);
    const sandbox = (await cri.listSandboxes()).find((s) => s.ready && s.namespace === namespace && s.name === name);
    if (!sandbox) throw new Error(`no ready sandbox for pod ${namespace}/${name}`);
    return cri.netnsPath(sandbox.id);
  }

  /** Network namespace files still under containerd's state dir (each a sandbox whose network was not torn down). */
  netnsLeft(): string[] {
    const dir = join(this.dir, 'run', 'containerd', 'io.containerd.grpc.v1.cri', 'netns');
    try {
      return readdirSync(dir).map((f) => join(dir, f));
    } catch {
      return [];
    }
  }

  // -- stop ----------------------------------------------------------------------------------------------------------

  /**
   * NOTES.md section 8: pods deleted, every sandbox stopped and removed through CRI (so CNI DEL runs), processes
   * stopped by PID, mounts under the root undone, the kubepods cgroups it made removed, host paths and kernel
   * settings put back, the conflist's bridges deleted, the root removed. Runs once; answers what went wrong.
   */
  stop(hooks: StopHooks = {}): Promise<string[]> {
    this.stopped ??= this.teardown(hooks);
    return this.stopped;
  }

  private async teardown(hooks: StopHooks): Promise<string[]> {
    const problems = await this.teardownSteps(hooks);
    this.turn?.release();
    return problems;
  }

  private async teardownSteps(hooks: StopHooks): Promise<string[]> {
    const problems: string[] = [];
    await this.releasePorts();
    const attempt = async (what: string, step: () => unknown): Promise<void> => {
      try {
        await step();
      } catch (e) {
        problems.push(`${what}: ${message(e)}`);
      }
    };
    if (this.running('kubelet') && this.apiFixture && this.pods.size > 0)
      await attempt('delete pods', () => this.deleteAllPods(30000));
    for (const close of this.watches.values()) close();
    this.watches.clear();
    await attempt('stop kubelet', () => this.stopProcess('kubelet'));
    if (this.running('containerd')) {
      await attempt('remove sandboxes through CRI', async () => {
        const cri = new CriRuntime(this.containerdSocket);
        for (const s of await cri.listSandboxes()) {
          await cri
            .stopSandbox(s.id)
            .catch((e) => problems.push(`StopPodSandbox ${s.namespace}/${s.name}: ${message(e)}`));
          await cri
            .removeSandbox(s.id)
            .catch((e) => problems.push(`RemovePodSandbox ${s.namespace}/${s.name}: ${message(e)}`));
        }
      });
      const left = this.netnsLeft();
      if (left.length)
        problems.push(`${left.length} pod network namespaces left after CRI removed the sandboxes (no CNI DEL?)`);
      await attempt('delete tasks left', () => {
        for (const line of this.ctr(['tasks', 'ls', '-q']).out.split('\n').filter(Boolean)) {
          this.ctr(['tasks', 'kill', '-s', 'SIGKILL', line]);
          this.ctr(['tasks', 'delete', '-f', line]);
        }
      });
    }
    await attempt('stop containerd', () => this.stopProcess('containerd'));
    await attempt('stop the scheduler', () => this.stopProcess('kube-scheduler'));
    await attempt('stop the controller-manager', () => this.stopProcess('kube-controller-manager'));
    await attempt('stop shims', () => this.killShims());
    if (hooks.runtimeStopped) await attempt('after the runtime stopped', hooks.runtimeStopped);
    await attempt('stop the API server', () => this.apiFixture?.stop());
    await attempt('unmount', () => unmountUnder(this.dir));
    await attempt('cgroups', () => problems.push(...this.cgroups.remove()));
    await attempt('host paths', () => problems.push(...this.host.restore()));
    await attempt('kernel settings', () => this.sysctls.restore());
    await attempt('links', () => {
      for (const l of this.links)
        if (!l.existed && linkExists(l.name)) execFileSync('ip', ['link', 'del', 'dev', l.name]);
    });
    const keep = process.env.PLEXUS_KEEP_NODE_LOGS;
    if (keep) await attempt(`keep the logs in ${keep}`, () => keepLogs(join(this.dir, 'log'), keep));
    await attempt(`remove ${this.dir}`, () => rmSync(this.dir, { recursive: true, force: true }));
    return problems;
  }

  /** SIGTERM to a process this fixture started, SIGKILL after 10 s. */
  private async stopProcess(name: string, graceMs = 10000): Promise<void> {
    const started = this.procs.find((s) => s.name === name);
    if (!started || !this.running(name)) return;
    started.proc.kill('SIGTERM');
    const timer = setTimeout(() => started.proc.kill('SIGKILL'), graceMs);
    await started.exited;
    clearTimeout(timer);
  }

  /** containerd-shim-runc-v2 processes of this node's containerd (their command line names its socket): SIGKILL by PID. */
  private async killShims(): Promise<void> {
    const ours = this.processesOfRoot();
    for (const pid of ours) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone already */
      }
    }
    for (let i = 0; i < 50 && this.processesOfRoot().length; i++) await sleep(100);
  }

  /** PIDs of processes whose command line names a path under this node's root (shims, or anything left of the node). */
  processesOfRoot(): number[] {
    const pids: number[] = [];
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
      try {
        if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(this.dir)) pids.push(Number(entry));
      } catch {
        /* exited meanwhile */
      }
    }
    return pids;
  }
}

const podObject = (
  name: string,
  nodeName: string,
  annotations: Readonly<Record<string, string>>,
  limits?: Readonly<Record<string, string>>,
): unknown => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, ...(Object.keys(annotations).length ? { annotations } : {}) },
  spec: {
    nodeName,
    // No token volume (no controller-manager publishes kube-root-ca.crt) and nothing to wait for at deletion.
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    terminationGracePeriodSeconds: 1,
    containers: [
      { name: 'c', image: PAUSE_IMAGE, imagePullPolicy: 'Never', ...(limits ? { resources: { limits } } : {}) },
    ],
  },
});

const linkExists = (name: string): boolean =>
  spawnSync('ip', ['link', 'show', 'dev', name], { stdio: 'ignore' }).status === 0;

/** Unmounts every mount point under dir, deepest first (the kubelet's shared bind of its root, sandboxes' shm, overlays). */
function unmountUnder(dir: string): void {
  for (let round = 0; round < 5; round++) {
    const mounts = readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .map((l) => (l.split(' ')[1] ?? '').replace(/\\040/g, ' '))
      .filter((m) => m === dir || m.startsWith(`${dir}/`))
      .sort((a, b) => b.split('/').length - a.split('/').length);
    if (mounts.length === 0) return;
    for (const m of mounts)
      if (spawnSync('umount', [m], { stdio: 'ignore' }).status !== 0)
        spawnSync('umount', ['-l', m], { stdio: 'ignore' });
  }
  throw new Error(`mounts left under ${dir}`);
}

/**
 * The host paths the kubelet hard-codes: a path there before is moved aside (renamed beside itself) and put back;
 * what the kubelet made is removed, as are the parent directories it needed.
 */
class HostPaths {
  private readonly claimed: { path: string; aside: string | undefined }[] = [];
  private readonly linkDirs: { path: string; target: string }[] = [];
  private readonly createdParents: string[] = [];
  private readonly trees: { path: string; before: ReadonlySet<string> }[] = [];

  /** Notes `path` and its ancestors that do not exist yet, to be removed (when empty) by restore(). */
  private noteMissing(path: string): void {
    for (let d = path; d !== '/' && !existsSync(d); d = dirname(d)) this.createdParents.push(d);
  }

  /** Directories a runtime makes on the way (containerd's /run/containerd/s, libcni's cache): removed afterwards if made now and empty. */
  watchDirs(paths: readonly string[]): void {
    for (const path of paths) this.noteMissing(path);
  }

  claim(paths: readonly string[]): void {
    for (const path of paths) {
      this.noteMissing(dirname(path));
      let aside: string | undefined;
      if (existsSync(path)) {
        aside = `${path}.plexus-aside-${randomBytes(3).toString('hex')}`;
        renameSync(path, aside);
      }
      this.claimed.push({ path, aside });
    }
  }

  /** A directory of symlinks (/var/log/containers): links into `target` are removed afterwards, the rest left. */
  claimLinkDir(path: string, target: string): void {
    this.noteMissing(path);
    this.linkDirs.push({ path, target });
  }

  /**
   * A shared data directory (host-local's): what is under it now stays; what the node adds is removed by restore() if
   * it is the plugin's own bookkeeping (`lock`, `last_reserved_ip.N`, the network's directory), and named as a problem
   * otherwise (a lease no DEL released).
   */
  keepTree(path: string): void {
    this.noteMissing(path);
    this.trees.push({ path, before: new Set(treeEntries(path)) });
  }

  restore(): string[] {
    const problems: string[] = [];
    for (const { path, before } of this.trees.splice(0))
      problems.push(...removeAdded(treeEntries(path).filter((e) => !before.has(e))));
    for (const { path, target } of this.linkDirs.splice(0)) {
      let entries: string[];
      try {
        entries = readdirSync(path);
      } catch {
        continue;
      }
      for (const e of entries) {
        const link = join(path, e);
        try {
          if (lstatSync(link).isSymbolicLink() && readlinkSync(link).startsWith(`${target}/`)) rmSync(link);
        } catch (err) {
          problems.push(`${link}: ${message(err)}`);
        }
      }
    }
    for (const { path, aside } of this.claimed.splice(0).reverse()) {
      try {
        rmSync(path, { recursive: true, force: true });
        if (aside) renameSync(aside, path);
      } catch (err) {
        problems.push(`restoring ${path}: ${message(err)}`);
      }
    }
    const depth = (d: string): number => d.split('/').length;
    for (const d of [...new Set(this.createdParents.splice(0))].sort((a, b) => depth(b) - depth(a))) {
      try {
        rmdirSync(d);
      } catch (err) {
        // Not empty: someone else's files came meanwhile (host-local's /var/lib/cni/networks, say); ours are checked elsewhere.
        if (!['ENOENT', 'ENOTEMPTY', 'EEXIST'].includes((err as NodeJS.ErrnoException).code ?? ''))
          problems.push(`${d} not removed: ${message(err)}`);
      }
    }
    return problems;
  }
}

/** What is under host-local's default dataDir now: each network directory and its files, sorted. */
export const hostLocalDataEntries = (): string[] => treeEntries(HOST_LOCAL_DATA_DIR).sort();

/** The entries of a data directory two levels deep (network directories and their files), deepest first. */
function treeEntries(root: string): string[] {
  const entries: string[] = [];
  let dirs: string[];
  try {
    dirs = readdirSync(root).map((d) => join(root, d));
  } catch {
    return [];
  }
  for (const dir of dirs) {
    try {
      entries.push(...readdirSync(dir).map((f) => join(dir, f)));
    } catch {
      /* a file, or gone */
    }
    entries.push(dir);
  }
  return entries;
}

const BOOKKEEPING = /^(lock|last_reserved_ip\.\d+)$/;

/** Removes what a node added to a data directory, deepest first: its bookkeeping and then-empty directories. */
function removeAdded(added: readonly string[]): string[] {
  const problems: string[] = [];
  for (const entry of added) {
    try {
      if (lstatSync(entry).isDirectory()) rmdirSync(entry);
      else if (BOOKKEEPING.test(basename(entry))) rmSync(entry);
      else problems.push(`${entry} left behind (a lease no DEL released?)`);
    } catch (err) {
      problems.push(`${entry} not removed: ${message(err)}`);
    }
  }
  return problems;
}

/** The kubelet's `kubepods` cgroup in every hierarchy where it was not before: removed (deepest first) afterwards. */
class KubeCgroups {
  private roots: string[] = [];

  record(): void {
    this.roots = readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .map((l) => l.split(' '))
      .filter((f) => f[2] === 'cgroup' || f[2] === 'cgroup2')
      .map((f) => join(f[1]!, 'kubepods'))
      .filter((p) => !existsSync(p));
  }

  remove(): string[] {
    const problems: string[] = [];
    for (const root of this.roots.splice(0)) {
      if (!existsSync(root)) continue;
      const dirs: string[] = [];
      const walk = (d: string): void => {
        for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(join(d, e.name));
        dirs.push(d);
      };
      walk(root);
      for (const d of dirs) {
        try {
          rmdirSync(d);
        } catch (err) {
          let procs = '';
          try {
            procs = readFileSync(join(d, 'cgroup.procs'), 'utf8').trim().replace(/\n/g, ',');
          } catch {
            /* no such file in this hierarchy */
          }
          problems.push(`cgroup ${d} not removed: ${message(err)}${procs ? ` (processes ${procs})` : ''}`);
        }
      }
    }
    return problems;
  }
}

/** Kernel settings the kubelet changes at start (vm.overcommit_memory, kernel.panic, ...): read before, written back after. */
export class KernelSettings {
  private readonly before = new Map<string, string>();

  constructor(private readonly keys: readonly string[]) {}

  record(): void {
    for (const k of this.keys) {
      try {
        this.before.set(k, readFileSync(`/proc/sys/${k}`, 'utf8'));
      } catch {
        /* not on this kernel */
      }
    }
  }

  restore(): void {
    for (const [k, v] of this.before)
      if (readFileSync(`/proc/sys/${k}`, 'utf8') !== v) writeFileSync(`/proc/sys/${k}`, v);
    this.before.clear();
  }
}

// -- a minimal CRI client -----------------------------------------------------------------------------------------------
// Debian has no crictl; tear-down needs ListPodSandbox, StopPodSandbox and RemovePodSandbox (these run CNI DEL), and the
// verification a pod's netns path (PodSandboxStatus, verbose). gRPC is HTTP/2 with length-prefixed protobuf messages;
// the few fields used are encoded and decoded by hand.

const varint = (n: number): Buffer => {
  const bytes: number[] = [];
  do {
    bytes.push((n & 0x7f) | (n > 0x7f ? 0x80 : 0));
    n = Math.floor(n / 128);
  } while (n > 0);
  return Buffer.from(bytes);
};
const stringField = (no: number, s: string): Buffer =>
  Buffer.concat([varint((no << 3) | 2), varint(Buffer.byteLength(s)), Buffer.from(s)]);
const varintField = (no: number, v: number): Buffer => Buffer.concat([varint(no << 3), varint(v)]);

/** The fields of one protobuf message: number -> values (Buffers for length-delimited, numbers for varints). */
function decode(buf: Buffer): Map<number, (Buffer | number)[]> {
  const fields = new Map<number, (Buffer | number)[]>();
  let i = 0;
  const readVarint = (): number => {
    let result = 0;
    let mul = 1;
    for (;;) {
      const b = buf[i++]!;
      result += (b & 0x7f) * mul;
      if (b < 0x80) return result;
      mul *= 128;
    }
  };
  while (i < buf.length) {
    const tag = readVarint();
    const no = Math.floor(tag / 8);
    let value: Buffer | number;
    switch (tag & 7) {
      case 0:
        value = readVarint();
        break;
      case 1:
        value = buf.subarray(i, i + 8);
        i += 8;
        break;
      case 2: {
        const len = readVarint();
        value = buf.subarray(i, i + len);
        i += len;
        break;
      }
      case 5:
        value = buf.subarray(i, i + 4);
        i += 4;
        break;
      default:
        throw new Error(`CRI: unsupported protobuf wire type ${tag & 7}`);
    }
    fields.set(no, [...(fields.get(no) ?? []), value]);
  }
  return fields;
}
const str = (f: Map<number, (Buffer | number)[]>, no: number): string => {
  const v = f.get(no)?.[0];
  return Buffer.isBuffer(v) ? v.toString('utf8') : '';
};

export class CriRuntime {
  constructor(private readonly socket: string) {}

  private call(method: string, request: Buffer, timeoutMs = 120000): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const session = http2Connect('http://localhost', { createConnection: () => netConnect(this.socket) });
      const fail = (e: Error): void => {
        session.destroy();
        reject(e);
      };
      session.on('error', fail);
      const req = session.request({
        ':method': 'POST',
        ':path': `/runtime.v1.RuntimeService/${method}`,
        'content-type': 'application/grpc',
        te: 'trailers',
      });
      req.setTimeout(timeoutMs, () => {
        req.close(http2Constants.NGHTTP2_CANCEL);
        fail(new Error(`CRI ${method}: no answer in ${timeoutMs} ms`));
      });
      let status: string | undefined;
      let detail = '';
      const note = (h: Record<string, unknown>): void => {
        const code = h['grpc-status'];
        if (typeof code === 'string' || typeof code === 'number') status = String(code);
        const text = h['grpc-message'];
        if (typeof text === 'string') detail = decodeURIComponent(text);
      };
      req.on('response', note);
      req.on('trailers', note);
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('error', fail);
      req.on('end', () => {
        session.close();
        if (status !== '0') return reject(new Error(`CRI ${method}: grpc-status ${status ?? '?'} ${detail}`));
        const all = Buffer.concat(chunks);
        resolve(all.length >= 5 ? all.subarray(5, 5 + all.readUInt32BE(1)) : Buffer.alloc(0));
      });
      const frame = Buffer.alloc(5 + request.length);
      frame.writeUInt32BE(request.length, 1);
      request.copy(frame, 5);
      req.end(frame);
    });
  }

  async listSandboxes(): Promise<Sandbox[]> {
    const reply = decode(await this.call('ListPodSandbox', Buffer.alloc(0)));
    return (reply.get(1) ?? [])
      .filter((b) => Buffer.isBuffer(b))
      .map((item) => {
        const s = decode(item);
        const meta = decode((s.get(2)?.[0] as Buffer | undefined) ?? Buffer.alloc(0));
        // state: SANDBOX_READY = 0 (proto3 leaves it out), SANDBOX_NOTREADY = 1
        return {
          id: str(s, 1),
          name: str(meta, 1),
          uid: str(meta, 2),
          namespace: str(meta, 3),
          ready: ((s.get(3)?.[0] as number | undefined) ?? 0) === 0,
        };
      });
  }

  async stopSandbox(id: string): Promise<void> {
    await this.call('StopPodSandbox', stringField(1, id));
  }

  async removeSandbox(id: string): Promise<void> {
    await this.call('RemovePodSandbox', stringField(1, id));
  }

  async netnsPath(id: string): Promise<string> {
    const reply = decode(await this.call('PodSandboxStatus', Buffer.concat([stringField(1, id), varintField(2, 1)])));
    for (const entry of (reply.get(2) ?? []).filter((b) => Buffer.isBuffer(b))) {
      const kv = decode(entry);
      if (str(kv, 1) !== 'info') continue;
      const info = JSON.parse(str(kv, 2)) as {
        runtimeSpec?: { linux?: { namespaces?: { type: string; path?: string }[] } };
      };
      const path = info.runtimeSpec?.linux?.namespaces?.find((n) => n.type === 'network')?.path;
      if (path) return path;
    }
    throw new Error(`sandbox ${id}: no network namespace in its verbose status`);
  }
}

/**
 * The node's CNI config: plexus-cni alone, forwarding to `socket`, with the pod's annotations (as containerd sends).
 * 1.0.0 by default, the version every runtime reads; with 1.1.0 containerd 2 also asks it STATUS for the node's
 * network readiness.
 */
export const plexusConflist = (socket: string, cniVersion = '1.0.0'): string =>
  JSON.stringify({
    cniVersion,
    name: 'plexus',
    plugins: [{ type: 'plexus-cni', socketPath: socket, capabilities: { 'io.kubernetes.cri.pod-annotations': true } }],
  });
