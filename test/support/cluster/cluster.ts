/**
 * A multi-node Kubernetes cluster on this one machine, kind-style without containers (../shared/k8s/NOTES.md section
 * 12): one control plane on the host (etcd, kube-apiserver, controller-manager, scheduler; KubeApiFixture and
 * ClusterControlPlane) and N worker nodes (node.ts), each its own network and mount namespace with its own containerd
 * 2, kubelet and plexusd. The nodes' uplinks are ports of one host bridge (the datacenter's L2 stand-in), whose
 * address carries a relay to the API server on the host's loopback. stop() removes everything, even after a failure
 * half-way through start().
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { buildPauseImage, containerdBinary, containerdBinDir, containerdMissing } from '../containerd';
import { ClusterControlPlane } from '../control-plane';
import { KubeApiFixture, k8sBinaryMissing } from '../k8s';
import { KernelSettings, kubeNodeMissing } from '../kube-node';
import { ip, ipTry, uniquePrefix } from '../netns';
import { Relay } from '../relay';
import { type IpamTiming, NodePaths } from './node-config';
import { ClusterNode, type NodeSpec } from './node';
import { makeMountPoints, removeMountPoints } from './node-namespaces';

export interface ClusterOptions {
  /** Worker nodes (default 3). */
  readonly nodes?: number;
  /** Names every node, link and namespace (default: a unique one). */
  readonly prefix?: string;
  /** plexusd's cluster IPAM timing on every node. */
  readonly timing?: IpamTiming;
  /** Start the nodes with their own CNI config only, Plexus installed later by the test (default true: at start). */
  readonly plexusAtStart?: boolean;
  /** More of plexusd's settings on each node (camelCase keys of docs/configuration.md), e.g. DRA's, from its paths. */
  readonly settings?: (node: NodePaths) => Readonly<Record<string, unknown>>;
  /** Runs once the API server is up, before any node starts: objects the nodes' daemons need at once (RBAC). */
  readonly beforeNodes?: (api: KubeApiFixture) => Promise<void>;
  /**
   * Which containerd the nodes run: containerd 2 (the default: what the DaemonSet's proofs need), or the run's pair's
   * ($PLEXUS_STACK: containerd 1.6 on the oldest pair), as the single-node tests do.
   */
  readonly runtime?: 'containerd 2' | "the run's pair";
  /**
   * Runs for each node once its processes started, before the node is waited for Ready: what its readiness waits
   * for (a test's own CNI daemon in the node).
   */
  readonly beforeReady?: (node: ClusterNode) => Promise<void>;
  /** A test's own CNI set-up on every node instead of the node's bridge network (NodeSpec.cni). */
  readonly cni?: (node: NodePaths) => { readonly confList: string; readonly binDir: string };
}

/** The part of a NodeSpec every node of one cluster shares. */
type SharedNodeSpec = Omit<NodeSpec, 'name' | 'root' | 'uplink' | 'podSubnet' | 'api' | 'cni'> & {
  readonly cniOf?: ClusterOptions['cni'];
};

/** Why the cluster cannot run here, or undefined when it can (`runtime` as ClusterOptions.runtime). */
export function clusterMissing(runtimeChoice: ClusterOptions['runtime'] = 'containerd 2'): string | undefined {
  const node = kubeNodeMissing();
  if (node) return node;
  const runtime = containerdBinDir(runtimeEnv(runtimeChoice));
  if (runtime.problem) return `containerd (${runtime.problem})`;
  if (!nodeContainerdDir(runtimeChoice))
    return runtimeChoice === 'containerd 2'
      ? "the cluster runs containerd 2 (a config of version 3); PLEXUS_CONTAINERD names the system's"
      : (containerdMissing() ?? 'no containerd on the PATH');
  const tools = ['unshare', 'nsenter', 'busybox'].filter((t) => spawnSync('which', [t]).status !== 0);
  if (tools.length) return `not installed: ${tools.join(', ')}`;
  return k8sBinaryMissing('kube-controller-manager') ?? k8sBinaryMissing('kube-scheduler');
}

/**
 * The environment that picks the nodes' containerd: by default containerd 2 whatever pair the run is on
 * ($PLEXUS_CONTAINERD's if set); "the run's pair" leaves the choice to $PLEXUS_STACK (containerd.ts).
 */
const runtimeEnv = (choice: ClusterOptions['runtime'] = 'containerd 2'): NodeJS.ProcessEnv =>
  choice === "the run's pair"
    ? process.env
    : { ...process.env, PLEXUS_CONTAINERD: process.env.PLEXUS_CONTAINERD?.trim() || '2' };

/** The major version of the containerd in `dir` (`containerd --version`). */
function containerdMajorOf(dir: string): number {
  const out = spawnSync(join(dir, 'containerd'), ['--version'], { encoding: 'utf8' }).stdout ?? '';
  const m = / v?(\d+)\.\d+\.\d+/.exec(out);
  if (!m) throw new Error(`${join(dir, 'containerd')} --version says no version: ${out}`);
  return Number(m[1]);
}

const random = (n: number): number => Math.floor(Math.random() * n);

/** Kernel settings the kubelet changes at start (it runs as on a real host): put back at stop. */
const KUBELET_SYSCTLS = ['vm/overcommit_memory', 'vm/panic_on_oom', 'kernel/panic', 'kernel/panic_on_oops'];

export class TestCluster {
  readonly nodes: ClusterNode[] = [];
  /** From the first node's start to every node Ready with plexusd ready, in ms. */
  nodesStartMs = NaN;
  private api_: KubeApiFixture | undefined;
  private readonly controlPlane = new ClusterControlPlane();
  private relay: Relay | undefined;
  private readonly sysctls = new KernelSettings([
    ...KUBELET_SYSCTLS,
    'kernel/keys/root_maxkeys',
    'kernel/keys/root_maxbytes',
  ]);
  private bridgeMade = false;
  /** Host directories made as the nodes' mount points. */
  private mountPoints: string[] = [];
  private stopped: Promise<string[]> | undefined;
  /** What every node's spec shares beyond its number, set by start(): addNode() makes more nodes of it. */
  private shared: SharedNodeSpec | undefined;
  /** The uplink subnet's first three octets: the bridge is .1, node i is .(10 + i). */
  private readonly lan = `10.${150 + random(40)}.${random(250)}`;

  private constructor(
    readonly prefix: string,
    readonly dir: string,
  ) {}

  get api(): KubeApiFixture {
    if (!this.api_) throw new Error('the cluster has no API server (start() failed before it)');
    return this.api_;
  }

  /** The API server's URL as the nodes reach it (the relay on the bridge). */
  get apiUrl(): string {
    if (!this.shared) throw new Error('the cluster has no API relay (start() failed before it)');
    return this.shared.apiUrl;
  }

  /** The last lines of the controller-manager's or the scheduler's log. */
  controlPlaneLogTail(name: 'kube-controller-manager' | 'kube-scheduler', lines = 40): string {
    try {
      const text = readFileSync(join(this.dir, 'control-plane', `${name}.log`), 'utf8');
      return text.trimEnd().split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  }

  /** The host bridge all uplinks are ports of. */
  get bridge(): string {
    return `${this.prefix}br`;
  }

  static async start(options: ClusterOptions = {}): Promise<TestCluster> {
    const prefix = options.prefix ?? uniquePrefix('pxc');
    const cluster = new TestCluster(prefix, mkdtempSync(join(tmpdir(), `plexus-cluster-${prefix}-`)));
    try {
      await cluster.startAll(options);
      return cluster;
    } catch (e) {
      const problems = await cluster.stop();
      const also = problems.length ? `\n(clean-up after the failed start: ${problems.join('; ')})` : '';
      throw new Error(`${(e as Error).message}${also}`, { cause: e });
    }
  }

  private async startAll(options: ClusterOptions): Promise<void> {
    const { nodes: count = 3, timing = {}, plexusAtStart: plexusAtBoot = true, settings } = options;
    ip('link', 'add', this.bridge, 'type', 'bridge');
    this.bridgeMade = true;
    ip('addr', 'add', `${this.lan}.1/24`, 'dev', this.bridge);
    ip('link', 'set', this.bridge, 'up');
    // The relay's address in the serving certificate: a pod's in-cluster client (the DaemonSet's) dials it by IP.
    // The nodes' names resolve nowhere: `kubectl exec` and `logs` reach a kubelet at its uplink address.
    this.api_ = await KubeApiFixture.startForPlexus({
      extraSans: [`IP:${this.lan}.1`],
      kubeletAddressTypes: ['InternalIP'],
    });
    await options.beforeNodes?.(this.api_);
    mkdirSync(join(this.dir, 'control-plane'));
    this.controlPlane.start(this.api, join(this.dir, 'control-plane'));
    this.relay = await Relay.start({ host: `${this.lan}.1`, port: 0 }, { host: '127.0.0.1', port: this.api.apiPort });
    if ('path' in this.relay.listening) throw new Error('the API relay should listen on TCP');
    const apiUrl = `https://${this.lan}.1:${this.relay.listening.port}`;
    const pauseArchive = buildPauseImage(join(this.dir, 'image'));
    const plexusKubeconfig = this.api.userKubeconfig('plexus');
    const containerdDir = nodeContainerdDir(options.runtime)!;
    const containerdMajor = containerdMajorOf(containerdDir);
    const cniOf = options.cni;
    this.shared = {
      ...{ apiUrl, plexusKubeconfig, pauseArchive, containerdDir, containerdMajor },
      ...{ timing, settings, plexusAtBoot, cniOf },
    };
    for (let i = 1; i <= count; i++) this.nodes.push(this.nodeNumbered(i));
    this.sysctls.record();
    this.mountPoints = makeMountPoints();
    const started = performance.now();
    await Promise.all(this.nodes.map((n) => n.start()));
    for (const n of this.nodes) await options.beforeReady?.(n);
    await Promise.all(this.nodes.map((n) => this.waitNodeReady(n.name)));
    this.nodesStartMs = performance.now() - started;
  }

  /** Node `i` of the cluster, made by the rules every node follows (its name, uplink, address and pod subnet by `i`). */
  private nodeNumbered(i: number): ClusterNode {
    if (!this.shared) throw new Error('the cluster has no node settings (start() failed before them)');
    const uplink = {
      bridge: this.bridge,
      hostEnds: [`${this.prefix}u${i}a`, `${this.prefix}u${i}b`] as const,
      address: `${this.lan}.${10 + i}/24`,
      gateway: `${this.lan}.1`,
    };
    const name = `${this.prefix}-n${i}`;
    const root = join(this.dir, `n${i}`);
    const { cniOf, ...shared } = this.shared;
    const spec = {
      name,
      root,
      uplink,
      podSubnet: `10.244.${i}.0/24`,
      api: this.api,
      cni: cniOf?.(new NodePaths(root)),
    };
    return new ClusterNode({ ...spec, ...shared });
  }

  /**
   * One more worker node, numbered after the last and made as start() makes them, joining the running cluster;
   * resolves once its Node is Ready (plexusd ready before, unless the cluster starts nodes without Plexus). stop()
   * removes it with the others, even when its start fails half-way.
   */
  async addNode(): Promise<ClusterNode> {
    const node = this.nodeNumbered(this.nodes.length + 1);
    this.nodes.push(node);
    await node.start();
    await this.waitNodeReady(node.name);
    return node;
  }

  /** Waits until the Node object says Ready (the kubelet runs and the runtime's network, Plexus's, is ready). */
  async waitNodeReady(name: string, timeoutMs = 90000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const node = await this.api.request('GET', `/api/v1/nodes/${name}`).catch(() => undefined);
      const conditions =
        (node?.body as { status?: { conditions?: { type: string; status: string }[] } } | undefined)?.status
          ?.conditions ?? [];
      if (conditions.some((c) => c.type === 'Ready' && c.status === 'True')) return;
      if (Date.now() > deadline) {
        const n = this.nodes.find((x) => x.name === name);
        throw new Error(`node ${name} not Ready after ${timeoutMs} ms:\n${n?.logTail('kubelet') ?? ''}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /**
   * Waits until the kubelet of node `name` has reported Ready at or after `since` (its Ready condition's
   * lastHeartbeatTime, whole seconds): a readiness the kubelet judged after a change the test made, not one left
   * from before it. Answers the milliseconds waited.
   */
  async waitReadyReportedSince(name: string, since: Date, timeoutMs = 60000): Promise<number> {
    const started = performance.now();
    const after = Math.ceil(since.getTime() / 1000) * 1000;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const node = await this.api.request('GET', `/api/v1/nodes/${name}`).catch(() => undefined);
      type Condition = { type: string; status: string; lastHeartbeatTime?: string; message?: string };
      const ready = (node?.body as { status?: { conditions?: Condition[] } } | undefined)?.status?.conditions?.find(
        (c) => c.type === 'Ready',
      );
      const heartbeat = ready?.lastHeartbeatTime ? Date.parse(ready.lastHeartbeatTime) : 0;
      if (ready?.status === 'True' && heartbeat >= after) return performance.now() - started;
      if (Date.now() > deadline)
        throw new Error(`node ${name} reported no Ready since ${since.toISOString()}: ${JSON.stringify(ready)}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /**
   * Where the nodes reach the API server (the host relay on the bridge): a pod's KUBERNETES_SERVICE_HOST and
   * KUBERNETES_SERVICE_PORT, the same on every node, since the cluster has no Service proxy.
   */
  get apiRelay(): { readonly host: string; readonly port: number } {
    const listening = this.relay?.listening;
    if (!listening || 'path' in listening) throw new Error('the cluster has no API relay (start() failed before it)');
    return { host: `${this.lan}.1`, port: listening.port };
  }

  /** Imports an image archive (scripts/image.sh's) into every node's containerd, as `ctr images import` on each. */
  importImage(archive: string): void {
    for (const n of this.nodes) {
      const r = n.ctr(['images', 'import', archive]);
      if (r.status !== 0) throw new Error(`ctr images import ${archive} on ${n.name}: ${r.out}`);
    }
  }

  node(name: string): ClusterNode {
    const n = this.nodes.find((x) => x.name === name);
    if (!n) throw new Error(`no node ${name} in the cluster`);
    return n;
  }

  /** Stops every node, deletes their Node objects, stops the control plane and removes the bridge and files. */
  stop(): Promise<string[]> {
    this.stopped ??= this.teardown();
    return this.stopped;
  }

  /**
   * With $PLEXUS_CLUSTER_LOGS set (a directory), the nodes' and the control plane's logs are copied under it, in
   * `<prefix>/`, before the cluster's files go: what a failed run leaves to read.
   */
  private keepLogs(): void {
    const to = process.env.PLEXUS_CLUSTER_LOGS?.trim();
    if (!to) return;
    const kept = join(to, this.prefix);
    const copies: [string, string][] = [
      ...this.nodes.map((n): [string, string] => [join(n.spec.root, 'log'), n.name]),
      [join(this.dir, 'control-plane'), 'control-plane'],
    ];
    for (const [from, name] of copies) if (existsSync(from)) cpSync(from, join(kept, name), { recursive: true });
    console.log(`the cluster's logs are kept in ${kept}`);
  }

  private async teardown(): Promise<string[]> {
    const problems: string[] = [];
    const attempt = async (what: string, step: () => unknown): Promise<void> => {
      try {
        await step();
      } catch (e) {
        problems.push(`${what}: ${(e as Error).message}`);
      }
    };
    for (const list of await Promise.all(this.nodes.map((n) => n.stop()))) problems.push(...list);
    if (this.api_) {
      for (const n of this.nodes)
        await attempt(`delete node ${n.name}`, () => this.api.request('DELETE', `/api/v1/nodes/${n.name}`));
    }
    await attempt('stop the control plane', () => this.controlPlane.stop());
    await attempt('stop the API relay', () => this.relay?.stop());
    await attempt('stop the API server', () => this.api_?.stop());
    await attempt('kernel settings', () => this.sysctls.restore());
    problems.push(...removeMountPoints(this.mountPoints));
    if (this.bridgeMade) {
      const r = ipTry('link', 'del', this.bridge);
      if (r.status !== 0) problems.push(`bridge ${this.bridge}: ${r.out.trim()}`);
    }
    await attempt('keep the logs', () => this.keepLogs());
    await attempt(`remove ${this.dir}`, () => rmSync(this.dir, { recursive: true, force: true }));
    return problems;
  }
}

/**
 * The directory of the nodes' containerd, ctr and shim: containerd 2's, or for "the run's pair" on the oldest pair the
 * system's (containerd 1.6 on the PATH or in $PLEXUS_CONTAINERD_BIN, config version 2); undefined when there is none.
 */
function nodeContainerdDir(choice: ClusterOptions['runtime']): string | undefined {
  const chosen = containerdBinDir(runtimeEnv(choice));
  if (chosen.dir || chosen.problem || choice !== "the run's pair") return chosen.dir;
  const system = containerdBinary('containerd');
  return system ? dirname(system) : undefined;
}
