/**
 * One worker node of the test cluster: its namespaces (node-namespaces.ts), its containerd, its kubelet, and plexusd
 * installed and started as the DaemonSet does it (plexus-install's install, then plexusd --config with the
 * ConfigMap's settings). Every process is started through the holder (`nsenter -t <holder> -m -n`, which execs, so
 * the PID kept is the process's own) and stopped by that PID; stop() then kills whatever else lives in the node's
 * mount namespace or cgroups (shims, pods), removes the cgroups, the namespace and the uplinks.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { issueCert } from '../certs';
import { getJson, PLEXUSD, ROOT } from '../daemon';
import { k8sBinary, type KubeApiFixture } from '../k8s';
import { CriRuntime, kubeletVerbosity } from '../kube-node';
import { containerPluginDir } from '../plugin-dir';
import { stopProcess } from '../processes';
import { until } from '../until';
import {
  containerdConfig,
  type IpamTiming,
  kubeletConfig,
  NodePaths,
  plexusdConfig,
  writeNodeKubeconfig,
} from './node-config';
import {
  boundSource,
  holderMountNs,
  inNode,
  killNodeProcesses,
  makeCgroupRoot,
  makeNodeNetns,
  nodeProcesses,
  removeCgroupRoot,
  removeNodeNetns,
  startHolder,
  type UplinkPlan,
} from './node-namespaces';

export interface NodeSpec {
  readonly name: string;
  readonly root: string;
  readonly uplink: UplinkPlan;
  /** The node's own pod network (its default network: a bridge with host-local), e.g. 10.244.1.0/24. */
  readonly podSubnet: string;
  readonly api: KubeApiFixture;
  /** The API as the node reaches it (the host relay on the bridge). */
  readonly apiUrl: string;
  /** plexusd's identity (the DaemonSet's service account stands for it). */
  readonly plexusKubeconfig: string;
  readonly pauseArchive: string;
  /** containerd 2's binaries. */
  readonly containerdDir: string;
  readonly timing: IpamTiming;
  /** More of plexusd's settings (camelCase keys of docs/configuration.md), e.g. DRA's, with the node's paths. */
  readonly settings?: (node: NodePaths) => Readonly<Record<string, unknown>>;
  /** Whether boot() installs and starts Plexus (default true); else the node runs its own CNI config only. */
  readonly plexusAtBoot?: boolean;
  /** containerd's major version (2 unless the run's pair is containerd 1.6's). */
  readonly containerdMajor?: number;
  /**
   * The node's CNI set-up when a test brings its own (a single-node test's plexusd, started by the test): this
   * conflist instead of the node's bridge network, and the runtime's plugins from `binDir`.
   */
  readonly cni?: { readonly confList: string; readonly binDir: string };
}

type NodeProcess = 'containerd' | 'kubelet' | 'plexusd';

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

export class ClusterNode {
  readonly paths: NodePaths;
  private holder: ChildProcess | undefined;
  private mountNs: string | undefined;
  private readonly procs = new Map<NodeProcess, ChildProcess>();
  /** Daemons a test added to the node (spawnDaemon), by name. */
  private readonly daemons = new Map<string, ChildProcess>();
  /** Whether boot() starts Plexus: from the spec, then as startPlexus and uninstallPlexus leave it. */
  private plexusInstalled: boolean;

  constructor(readonly spec: NodeSpec) {
    this.paths = new NodePaths(spec.root);
    this.plexusInstalled = spec.plexusAtBoot ?? true;
  }

  get name(): string {
    return this.spec.name;
  }
  /** uplink0's address, without its prefix length. */
  get address(): string {
    return this.spec.uplink.address.split('/')[0]!;
  }
  /** The node's network namespace (a name under /var/run/netns). */
  get netns(): string {
    return this.spec.name;
  }

  /** Makes the namespaces and files, then starts containerd, the kubelet and plexusd; resolves once all are up. */
  async start(): Promise<void> {
    makeNodeNetns(this.netns, this.spec.uplink);
    for (const d of ['certs', 'etc/cni/net.d', 'log', 'run/containerd', 'run/plexus', 'var/lib/plexus', 'var/log/pods'])
      mkdirSync(join(this.spec.root, d), { recursive: true });
    containerPluginDir(this.paths.cniBinDir); // the DaemonSet's plexusd runs the node network's plugins from it
    this.writeFiles();
    await this.boot();
  }

  /** Starts the node's processes on the files it has: at first start, and after crash(). */
  async boot(): Promise<void> {
    makeCgroupRoot(this.name);
    this.holder = await startHolder(this.netns, this.spec.root);
    this.mountNs = holderMountNs(this.holder);
    await this.startContainerd();
    this.startKubelet();
    if (this.plexusInstalled) await this.startPlexus();
  }

  /** Starts the kubelet (at boot, or again after stopKubelet); answers when it was spawned (Date.now()). */
  startKubelet(): number {
    const spawnedAt = Date.now();
    this.spawn('kubelet', k8sBinary('kubelet')!, [
      `--config=${this.paths.etc('kubelet-config.json')}`,
      `--kubeconfig=${this.paths.etc('kubelet.kubeconfig')}`,
      `--hostname-override=${this.name}`,
      `--node-ip=${this.address}`,
      `--volume-plugin-dir=${join(this.spec.root, 'var', 'lib', 'kubelet-plugins')}`,
      ...kubeletVerbosity(),
    ]);
    return spawnedAt;
  }

  /** Stops the kubelet (SIGTERM) and leaves it stopped, as a crash or an upgrade would; pods keep running. */
  async stopKubelet(): Promise<void> {
    await stopProcess(this.procs.get('kubelet'), 'SIGTERM', 10000);
    this.procs.delete('kubelet');
  }

  /** Stops containerd (SIGTERM); the pods' shims and network namespaces live on. */
  async stopContainerd(): Promise<void> {
    await stopProcess(this.procs.get('containerd'), 'SIGTERM', 10000);
    this.procs.delete('containerd');
  }

  /**
   * Stops containerd and starts it again with the same config, as an upgrade or a crash of the runtime would;
   * resolves once CRI serves again (containerd 1.6 answers ctr before its CRI plugin has loaded the sandboxes).
   */
  async restartContainerd(): Promise<void> {
    await this.stopContainerd();
    await this.startContainerd();
    const cri = new CriRuntime(this.paths.containerdSocket);
    await until(
      `CRI serving on ${this.name} after the restart`,
      () => cri.listSandboxes().then(() => true),
      20000,
      100,
    );
  }

  /**
   * A path inside the node's mount namespace as the host reaches it (through the holder's root): a pod's network
   * namespace under the node's /run/netns, say.
   */
  hostPath(path: string): string {
    if (!this.holder?.pid) throw new Error(`node ${this.name} is not running`);
    // An absolute symlink met past /proc/<pid>/root resolves against the host's root: /var/run is such a link.
    return `/proc/${this.holder.pid}/root${path.replace(/^\/var\/run\//, '/run/')}`;
  }

  /** The node's /var/lib/kubelet, as a host path (the directory bound over it). */
  get kubeletRoot(): string {
    return boundSource(this.spec.root, '/var/lib/kubelet');
  }

  /** The node's /var/lib/cni/networks (host-local's default data dir), as a host path. */
  get hostLocalDataDir(): string {
    return join(boundSource(this.spec.root, '/var/lib/cni'), 'networks');
  }

  /** The files under the node's /run/netns: each a pod network namespace not yet removed. */
  netnsLeft(): string[] {
    const dir = boundSource(this.spec.root, '/run/netns');
    try {
      return readdirSync(dir).map((f) => join('/run/netns', f));
    } catch {
      return [];
    }
  }

  /** The command the node's processes run under: `nsenter` into its mount and network namespaces (it execs). */
  get launcher(): readonly string[] {
    if (!this.holder?.pid) throw new Error(`node ${this.name} is not running`);
    return ['nsenter', '-t', String(this.holder.pid), '-m', '-n', '--'];
  }

  /**
   * What the DaemonSet's pod does on the node: plexus-install's install, then plexusd; resolves once it is ready.
   * `multusDaemonConfig`: thick Multus's daemon config, which the installer lays over Multus's shim config.
   */
  async startPlexus(install: { readonly multusDaemonConfig?: string } = {}): Promise<void> {
    this.installPlexus(install.multusDaemonConfig ?? join(this.paths.root, 'etc', 'no-multus.json'));
    this.plexusInstalled = true;
    this.spawn('plexusd', PLEXUSD, ['--config', this.paths.etc('plexusd.json')], { NODE_NAME: this.name });
    await until(`plexusd ready on ${this.name}`, () => this.plexusReady(), 60000, 200);
  }

  /** plexusd stopped by its PID as the kubelet stops the DaemonSet's pod (SIGTERM); resolves once it has exited. */
  async stopPlexus(): Promise<void> {
    await stopProcess(this.procs.get('plexusd'), 'SIGTERM', 30000);
    this.procs.delete('plexusd');
  }

  /** What deploy/uninstall/ does on the node, plexusd stopped: Plexus's conflist and shim go, the node's own config is back. */
  async uninstallPlexus(): Promise<void> {
    await this.stopPlexus();
    const p = this.paths;
    const r = this.run([
      join(ROOT, 'bin', 'plexus-install'),
      'uninstall',
      '--cni-bin-dir',
      p.cniBinDir,
      '--cni-conf-dir',
      p.cniConfDir,
    ]);
    if (r.status !== 0) throw new Error(`plexus-install uninstall on ${this.name}: ${r.out}`);
    this.plexusInstalled = false;
  }

  private writeFiles(): void {
    const { api, name } = this.spec;
    const caDir = join(api.dir, 'certs');
    const ca = { cert: join(caDir, 'ca.crt'), key: join(caDir, 'ca.key') };
    issueCert(this.paths.certs, ca, 'kubelet-server', `/CN=${name}`, 'serverAuth', `IP:${this.address}`);
    const client = api.userKubeconfig(`system:node:${name}`, ['system:nodes']);
    writeNodeKubeconfig(client, this.paths.etc('kubelet.kubeconfig'), this.spec.apiUrl);
    const identity = { nodeName: name, nodeIp: this.address, clientCa: ca.cert };
    writeFileSync(this.paths.etc('kubelet-config.json'), JSON.stringify(kubeletConfig(this.paths, identity)));
    const runtime = { major: this.spec.containerdMajor ?? 2, cniBinDir: this.spec.cni?.binDir };
    writeFileSync(this.paths.etc('containerd.toml'), containerdConfig(this.paths, runtime));
    const plexusKubeconfig = this.paths.etc('plexus.kubeconfig');
    writeNodeKubeconfig(this.spec.plexusKubeconfig, plexusKubeconfig, this.spec.apiUrl);
    const asked = { ...this.spec.timing, ...this.spec.settings?.(this.paths) };
    const settings = plexusdConfig(this.paths, plexusKubeconfig, asked);
    writeFileSync(this.paths.etc('plexusd.json'), JSON.stringify(settings));
    mkdirSync(this.paths.staticPodDir, { recursive: true });
    mkdirSync(this.paths.cdiDir, { recursive: true }); // there before containerd watches it
    if (this.spec.cni) {
      writeFileSync(join(this.paths.cniConfDir, '10-test.conflist'), this.spec.cni.confList);
      return;
    }
    // The node's own CNI config, as a node has before Plexus comes: plexus-install makes it every pod's eth0.
    const podnet = {
      cniVersion: '1.0.0',
      name: 'podnet',
      plugins: [
        {
          type: 'bridge',
          bridge: 'cni0',
          isGateway: true,
          ipam: { type: 'host-local', ranges: [[{ subnet: this.spec.podSubnet }]] },
        },
      ],
    };
    writeFileSync(join(this.paths.cniConfDir, '10-podnet.conflist'), JSON.stringify(podnet));
  }

  private async startContainerd(): Promise<void> {
    this.procs.delete('containerd');
    const bin = join(this.spec.containerdDir, 'containerd');
    // containerd finds its shim on the PATH.
    const PATH = `${this.spec.containerdDir}${delimiter}${process.env.PATH ?? ''}`;
    this.spawn('containerd', bin, ['--config', this.paths.etc('containerd.toml')], { PATH });
    await until(
      `containerd on ${this.name}`,
      () => {
        if (!this.running('containerd')) throw new Error(`containerd exited:\n${this.logTail('containerd')}`);
        return this.ctr(['version']).status === 0 || undefined;
      },
      30000,
      100,
    );
    const imported = this.ctr(['images', 'import', this.spec.pauseArchive]);
    if (imported.status !== 0) throw new Error(`ctr images import on ${this.name}: ${imported.out}`);
  }

  /** The DaemonSet's init container: the shim into the node's bin dir, the primary config found and linked. */
  private installPlexus(multusDaemonConfig: string): void {
    const p = this.paths;
    const r = inNode(this.holder!.pid!, [
      join(ROOT, 'bin', 'plexus-install'),
      'install',
      '--cni-bin-dir',
      p.cniBinDir,
      '--cni-conf-dir',
      p.cniConfDir,
      '--default-network-link',
      join(p.plexusState, 'default-network'),
      '--imported-config',
      join(p.plexusState, 'imported-config.json'),
      '--multus-daemon-config',
      multusDaemonConfig,
      '--wait-seconds',
      '30',
    ]);
    if (r.status !== 0) throw new Error(`plexus-install on ${this.name}: ${r.out}`);
  }

  private async plexusReady(): Promise<true | undefined> {
    if (!this.running('plexusd')) throw new Error(`plexusd exited on ${this.name}:\n${this.logTail('plexusd')}`);
    const ready = await getJson(this.paths.plexusSocket, '/readyz').catch(() => undefined);
    return ready?.status === 200 || undefined;
  }

  private spawn(name: NodeProcess, bin: string, args: readonly string[], env: NodeJS.ProcessEnv = {}): void {
    this.procs.set(name, this.launch(name, [bin, ...args], env));
  }

  /** Starts `command` in the node's namespaces (nsenter execs it: the PID is its own), its output in log/<name>.log. */
  private launch(name: string, command: readonly string[], env: NodeJS.ProcessEnv): ChildProcess {
    const fd = openSync(this.paths.log(name), 'a');
    const args = ['-t', String(this.holder!.pid), '-m', '-n', '--', ...command];
    const proc = spawn('nsenter', args, { stdio: ['ignore', fd, fd], env: { ...process.env, ...env } });
    closeSync(fd);
    proc.once('error', () => undefined); // an exec failure shows as an exit
    return proc;
  }

  /**
   * Starts one more daemon on the node (another network add-on's, e.g. Multus's), its output in log/<name>.log.
   * It is stopped by its PID, by stopDaemon or by stop(): one that makes a mount namespace of its own is not among
   * the processes stop() finds in the node's.
   */
  spawnDaemon(name: string, command: readonly string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
    const proc = this.launch(name, command, env);
    this.daemons.set(name, proc);
    return proc;
  }

  /** Stops a daemon spawnDaemon started (SIGTERM, SIGKILL after 10 s); resolves once it has exited. */
  async stopDaemon(name: string): Promise<void> {
    await stopProcess(this.daemons.get(name), 'SIGTERM');
    this.daemons.delete(name);
  }

  running(name: NodeProcess): boolean {
    const p = this.procs.get(name);
    return p !== undefined && p.exitCode === null && p.signalCode === null;
  }

  /** PIDs of the node's three daemons that run. */
  get pids(): Partial<Record<NodeProcess, number>> {
    return Object.fromEntries([...this.procs].filter(([n, p]) => this.running(n) && p.pid).map(([n, p]) => [n, p.pid]));
  }

  /** Resident memory of each daemon of the node, in MiB (VmRSS). */
  rssMib(): Partial<Record<NodeProcess, number>> {
    const rss = (pid: number): number => {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      return Number(m?.[1] ?? NaN) / 1024;
    };
    return Object.fromEntries(Object.entries(this.pids).map(([n, pid]) => [n, rss(pid)]));
  }

  logTail(name: string, lines = 30): string {
    try {
      return readFileSync(this.paths.log(name), 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  }

  /** `ctr` against this node's containerd, in the CRI's namespace. */
  ctr(args: readonly string[]): { status: number | null; out: string } {
    const r = spawnSync(
      join(this.spec.containerdDir, 'ctr'),
      ['--address', this.paths.containerdSocket, '-n', 'k8s.io', ...args],
      {
        encoding: 'utf8',
        timeout: 60000,
      },
    );
    return { status: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
  }

  /** The network namespace path of a pod's ready sandbox on this node (a path inside the node's mount namespace). */
  async podNetns(namespace: string, name: string): Promise<string> {
    const cri = new CriRuntime(this.paths.containerdSocket);
    const sandbox = (await cri.listSandboxes()).find((s) => s.ready && s.namespace === namespace && s.name === name);
    if (!sandbox) throw new Error(`no ready sandbox for pod ${namespace}/${name} on ${this.name}`);
    return cri.netnsPath(sandbox.id);
  }

  /** Runs a host program on the node: in its network and mount namespaces. */
  run(command: readonly string[], timeoutMs = 30000): { status: number | null; out: string } {
    if (!this.holder?.pid) throw new Error(`node ${this.name} is not running`);
    return inNode(this.holder.pid, command, timeoutMs);
  }

  /** Runs a host program inside a pod's network namespace (the pods run pause only). */
  inPod(netnsPath: string, command: readonly string[], timeoutMs = 30000): { status: number | null; out: string } {
    return this.run(['nsenter', `--net=${netnsPath}`, '--', ...command], timeoutMs);
  }

  /**
   * Starts a program in a pod's network namespace and leaves it running (a server); nsenter execs, so the caller
   * stops it by this PID.
   */
  spawnInPod(netnsPath: string, command: readonly string[]): ChildProcess {
    const args = ['-t', String(this.holder!.pid), '-m', '-n', '--', 'nsenter', `--net=${netnsPath}`, '--', ...command];
    return spawn('nsenter', args, { stdio: ['pipe', 'pipe', 'pipe'] });
  }

  /**
   * The machine dies: every process of the node (its daemons, shims and pods, the holder) gets SIGKILL, so its pods'
   * network namespaces go with it; what a reboot clears (/run) is removed, the disks (kubelet, containerd and plexusd
   * state) stay. The network namespace, the node's NIC, stays.
   */
  async crash(): Promise<void> {
    await killNodeProcesses(this.mountNs, this.name);
    this.procs.clear();
    this.holder = undefined;
    for (const d of ['run', join('bound', '_run_netns'), join('bound', '_run_containerd')])
      rmSync(join(this.spec.root, d), { recursive: true, force: true });
    for (const d of ['run/containerd', 'run/plexus']) mkdirSync(join(this.spec.root, d), { recursive: true });
  }

  /**
   * Stops the node: the kubelet, containerd and plexusd by PID (SIGTERM), then every process left in its mount
   * namespace or cgroups (SIGKILL), its cgroups, its network namespace and uplinks. Answers what went wrong.
   */
  async stop(): Promise<string[]> {
    const problems: string[] = [];
    const attempt = async (what: string, step: () => unknown): Promise<void> => {
      try {
        await step();
      } catch (e) {
        problems.push(`${this.name}: ${what}: ${message(e)}`);
      }
    };
    for (const name of [...this.daemons.keys()]) await attempt(`stop ${name}`, () => this.stopDaemon(name));
    for (const name of ['kubelet', 'containerd', 'plexusd'] as const)
      await attempt(`stop ${name}`, () => stopProcess(this.procs.get(name), 'SIGTERM', 5000));
    await attempt('kill what is left', async () => {
      const left = await killNodeProcesses(this.mountNs, this.name);
      if (left.length) problems.push(`${this.name}: processes left: ${left.join(' ')}`);
    });
    await attempt('holder', () => stopProcess(this.holder, 'SIGKILL'));
    await attempt('cgroups', () => problems.push(...removeCgroupRoot(this.name)));
    await attempt('netns', () => problems.push(...removeNodeNetns(this.netns, this.spec.uplink)));
    return problems;
  }
  /**
   * Waits until the node's runtime says its network is ready (CRI Status, NetworkReady), as the kubelet asks it
   * before it makes a pod's sandbox; answers the milliseconds waited and each distinct reason it gave meanwhile.
   */
  async waitNetworkReady(timeoutMs = 120000): Promise<{ waitedMs: number; reasons: string[] }> {
    const started = performance.now();
    const cri = new CriRuntime(this.paths.containerdSocket);
    const reasons: string[] = [];
    const ready = async (): Promise<true | undefined> => {
      const network = (await cri.conditions()).find((c) => c.type === 'NetworkReady');
      const why = network ? `${network.reason}: ${network.message}` : 'no NetworkReady condition';
      if (!network?.status && reasons.at(-1) !== why) reasons.push(why);
      return network?.status || undefined;
    };
    await until(`${this.name}'s runtime network ready`, ready, timeoutMs, 200).catch((e: unknown) => {
      throw new Error(`${message(e)} (${reasons.join('; then ')})`);
    });
    return { waitedMs: performance.now() - started, reasons };
  }

  /** The runtime's CNI plugin directory: the test's own (NodeSpec.cni) or the node's /opt/cni/bin. */
  get runtimeCniBinDir(): string {
    return this.spec.cni?.binDir ?? this.paths.cniBinDir;
  }

  /**
   * PIDs of every process of the node: in its mount namespace (its daemons, shims, the holder) or its cgroups (its
   * pods). None once stop() is done.
   */
  processes(): number[] {
    return nodeProcesses(this.mountNs, this.name);
  }
}
