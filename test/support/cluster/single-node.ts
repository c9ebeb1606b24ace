/**
 * The single-node tests' and benchmarks' node: the test cluster (cluster.ts) with one node, in its own network and
 * mount namespaces with its own containerd (the run's pair: containerd 2, or 1.6 on the oldest pair) and kubelet,
 * whose runtime runs the test's CNI config (plexus-cni forwarding to a plexusd the test starts inside the node, on
 * the node's `launcher`). What such a test asks of a node: pods bound to it and timed to Running (node-pods.ts), its
 * sandboxes through CRI, a pod's network namespace as the host reaches it, the kubelet and containerd restarted, static
 * pods. stop() deletes the pods and removes every sandbox through CRI (so each gets its CNI DEL while the test's plexusd
 * still serves), names a network namespace left behind, then stops the cluster.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { KubeApiFixture } from '../k8s';
import { CriRuntime, type Sandbox } from '../kube-node';
import { TestCluster, clusterMissing } from './cluster';
import type { ClusterNode } from './node';
import { writeNodeKubeconfig } from './node-config';
import { ensureNamespace } from './pods';
import { type CreatePodsOptions, NodePods, podObject, type RunningTimings } from './node-pods';

export interface SingleNodeOptions {
  /** The runtime's CNI config, written to the node's /etc/cni/net.d (a function of the node's root directory). */
  readonly cniConfList: string | ((root: string) => string);
  /** The runtime's CNI plugin directory (the reference plugins and plexus-cni). */
  readonly cniBinDir: string;
  /** Names the cluster's links, namespaces and node (default: a unique one). */
  readonly prefix?: string;
  /**
   * Runs once the node's processes started, before it is waited for Ready, with the node's launcher: a CNI daemon
   * the node's readiness waits for (a 1.1.0 conflist's STATUS) is started here.
   */
  readonly beforeReady?: (launcher: readonly string[]) => Promise<void>;
}

export interface StopHooks {
  /**
   * Runs once containerd is gone (no CNI call can come any more) and before the API server stops: the place to stop a
   * CNI daemon that watches the API (the API server takes its full 10 s SIGTERM grace while such watches are open).
   */
  readonly runtimeStopped?: () => Promise<unknown>;
}

/** Why a single-node cluster cannot run here, or undefined. */
export const singleNodeMissing = (): string | undefined => clusterMissing("the run's pair");

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

export class SingleNode {
  private readonly pods: NodePods;
  private stopped: Promise<string[]> | undefined;

  private constructor(
    readonly cluster: TestCluster,
    readonly node: ClusterNode,
  ) {
    const down = (): string | undefined =>
      !node.running('kubelet')
        ? 'the kubelet is not running'
        : !node.running('containerd')
          ? 'containerd is not running'
          : undefined;
    this.pods = new NodePods(cluster.api, node.name, node.paths.containerdSocket, down);
  }

  /** Starts a cluster of one node running the test's CNI config; resolves once the node is Ready. */
  static async start(options: SingleNodeOptions): Promise<SingleNode> {
    const cluster = await TestCluster.start({
      nodes: 1,
      prefix: options.prefix,
      plexusAtStart: false,
      runtime: "the run's pair",
      beforeReady: async (node) => options.beforeReady?.(node.launcher),
      cni: (paths) => ({
        confList: typeof options.cniConfList === 'string' ? options.cniConfList : options.cniConfList(paths.root),
        binDir: options.cniBinDir,
      }),
    });
    try {
      // The controller-manager makes sa/default a moment after start; a pod a test posts before it is refused.
      await ensureNamespace(cluster.api, 'default');
    } catch (e) {
      await cluster.stop();
      throw e;
    }
    return new SingleNode(cluster, cluster.nodes[0]!);
  }

  get api(): KubeApiFixture {
    return this.cluster.api;
  }
  get nodeName(): string {
    return this.node.name;
  }
  /** The node's root directory (its files, logs and bound directories). */
  get dir(): string {
    return this.node.paths.root;
  }
  get containerdSocket(): string {
    return this.node.paths.containerdSocket;
  }
  get cniConfDir(): string {
    return this.node.paths.cniConfDir;
  }
  /** The node's /var/lib/kubelet as the host reaches it (its sockets serve the same from both sides). */
  get kubeletRoot(): string {
    return this.node.kubeletRoot;
  }
  /** The node's CDI spec directory (its /run/cdi), which containerd 2 reads. */
  get cdiDir(): string {
    return this.node.paths.cdiDir;
  }
  /** The node's network namespace (under /run/netns): where its links live. */
  get netns(): string {
    return this.node.netns;
  }
  /** The command that runs a program in the node's namespaces (DaemonFixture.launcher for the test's plexusd). */
  get launcher(): readonly string[] {
    return this.node.launcher;
  }

  /** A kubeconfig for a process inside the node (plexusd): `user`'s, through the API relay the node reaches. */
  nodeKubeconfig(user: string, groups: readonly string[] = []): string {
    const to = join(this.dir, 'etc', `${user.replace(/[^a-zA-Z0-9-]/g, '_')}.node.kubeconfig`);
    writeNodeKubeconfig(this.api.userKubeconfig(user, [...groups]), to, this.cluster.apiUrl);
    return to;
  }

  /** Runs a host program inside the node's namespaces. */
  run(command: readonly string[], timeoutMs = 30000): { status: number | null; out: string } {
    return this.node.run(command, timeoutMs);
  }

  // -- the node's processes ------------------------------------------------------------------------------------------

  /** Stops the kubelet and starts it again with the same configuration; answers when the new one was spawned. */
  async restartKubelet(): Promise<number> {
    await this.node.stopKubelet();
    return this.node.startKubelet();
  }
  stopKubelet(): Promise<void> {
    return this.node.stopKubelet();
  }
  /** Starts the kubelet stopKubelet stopped; answers when it was spawned (Date.now()). */
  async startKubeletAgain(): Promise<number> {
    return this.node.startKubelet();
  }
  restartContainerd(): Promise<void> {
    return this.node.restartContainerd();
  }
  get pids(): Record<string, number> {
    return this.node.pids;
  }
  logTail(name: 'kubelet' | 'containerd' | 'kube-scheduler' | 'kube-controller-manager', lines = 40): string {
    return name === 'kubelet' || name === 'containerd'
      ? this.node.logTail(name, lines)
      : this.cluster.controlPlaneLogTail(name, lines);
  }
  ctr(args: readonly string[]): { status: number | null; out: string } {
    return this.node.ctr(args);
  }

  // -- static pods ---------------------------------------------------------------------------------------------------

  get staticPodDir(): string {
    return this.node.paths.staticPodDir;
  }
  /** Runs a static pod (pause) from a manifest in staticPodPath; answers its mirror pod's name. */
  writeStaticPod(name: string, annotations: Readonly<Record<string, string>> = {}): string {
    writeFileSync(join(this.staticPodDir, `${name}.json`), JSON.stringify(podObject(name, this.nodeName, annotations)));
    return `${name}-${this.nodeName}`;
  }
  /** Removes a static pod's manifest: the kubelet stops the pod and deletes its mirror pod. */
  removeStaticPod(name: string): void {
    rmSync(join(this.staticPodDir, `${name}.json`), { force: true });
  }

  // -- pods ----------------------------------------------------------------------------------------------------------

  /** A request to the API server as the admin. */
  call(
    method: string,
    path: string,
    body?: unknown,
    contentType = 'application/json',
  ): ReturnType<KubeApiFixture['request']> {
    return this.api.request(method, path, body, contentType);
  }
  createPods(n: number, options: CreatePodsOptions = {}): Promise<string[]> {
    return this.pods.createPods(n, options);
  }
  waitAllRunning(names: readonly string[], timeoutMs: number, namespace = 'default'): Promise<RunningTimings> {
    return this.pods.waitAllRunning(names, timeoutMs, namespace);
  }
  describePods(namespace: string, names: readonly string[]): Promise<string> {
    return this.pods.describePods(namespace, names);
  }
  sandboxFailures(namespace: string): Promise<string[]> {
    return this.pods.sandboxFailures(namespace);
  }
  pod(namespace: string, name: string): ReturnType<NodePods['pod']> {
    return this.pods.pod(namespace, name);
  }
  deleteAllPods(timeoutMs = 120000): Promise<number> {
    return this.pods.deleteAllPods(timeoutMs);
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

  // -- CRI -----------------------------------------------------------------------------------------------------------

  sandboxes(): Promise<Sandbox[]> {
    return new CriRuntime(this.containerdSocket).listSandboxes();
  }

  /** A pod's network namespace as the host reaches it (`nsenter --net=` from the test works on it). */
  async podNetns(namespace: string, name: string): Promise<string> {
    return this.node.hostPath(await this.node.podNetns(namespace, name));
  }

  /** The node's pod network namespaces not yet removed (each a sandbox whose network was not torn down). */
  netnsLeft(): string[] {
    return this.node.netnsLeft();
  }

  // -- stop ----------------------------------------------------------------------------------------------------------

  /**
   * Pods deleted, every sandbox stopped and removed through CRI (so CNI DEL runs), a network namespace left named as
   * a problem, containerd stopped, then `hooks.runtimeStopped`, then the cluster stopped. Runs once; answers what
   * went wrong.
   */
  stop(hooks: StopHooks = {}): Promise<string[]> {
    this.stopped ??= this.teardown(hooks);
    return this.stopped;
  }

  private async teardown(hooks: StopHooks): Promise<string[]> {
    const problems: string[] = [];
    const attempt = async (what: string, step: () => unknown): Promise<void> => {
      try {
        await step();
      } catch (e) {
        problems.push(`${what}: ${message(e)}`);
      }
    };
    if (this.node.running('kubelet') && this.pods.any) await attempt('delete pods', () => this.deleteAllPods(30000));
    this.pods.close();
    await attempt('stop kubelet', () => this.node.stopKubelet());
    if (this.node.running('containerd')) {
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
    }
    await attempt('stop containerd', () => this.node.stopContainerd());
    if (hooks.runtimeStopped) await attempt('after the runtime stopped', hooks.runtimeStopped);
    problems.push(...(await this.cluster.stop()));
    return problems;
  }
}
