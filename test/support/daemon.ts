/**
 * End-to-end fixtures: a real plexusd process on a private socket and state dir, NAD files, and plexus-cni
 * exec'd exactly as a container runtime execs it. Everything is removed in `stop()`, even after failures.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { hostVethName } from '../../src/drivers/bridge';
import { type DaemonSettings, daemonFlags } from './daemon-flags';
import type { NetnsFixture } from './netns';
import { holdsWithin } from './until';

export const ROOT = resolve(__dirname, '../../..');
export const SHIM = join(ROOT, 'bin/plexus-cni');
export const PLEXUSD = join(ROOT, 'bin/plexusd');

export interface ShimCall {
  readonly command: string;
  readonly containerId?: string;
  readonly netns?: string;
  readonly ifname?: string;
  readonly args?: string;
  readonly config?: Record<string, unknown> | string;
  /** Env entries to set (undefined removes the variable entirely). */
  readonly env?: Record<string, string | undefined>;
}

export interface ShimOutput {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly json: Record<string, unknown> | undefined;
}

/** A GET to plexusd, on its socket or over TCP: the status, the content type and the body as text. */
export function httpGet(options: {
  readonly socketPath?: string;
  readonly host?: string;
  readonly port?: number;
  readonly path: string;
}): Promise<{ status: number; type: string; body: string }> {
  return new Promise((resolvePromise, reject) => {
    const req = request({ ...options, method: 'GET' }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () =>
        resolvePromise({ status: res.statusCode ?? 0, type: String(res.headers['content-type']), body }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

export async function getJson(socketPath: string, path: string): Promise<{ status: number; body: unknown }> {
  const { status, body } = await httpGet({ socketPath, path });
  return { status, body: body ? (JSON.parse(body) as unknown) : undefined };
}

/** The value of one sample of Prometheus text, e.g. metricSample(text, 'plexus_attachments{network="default/podnet"}'). */
export function metricSample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

export interface BridgeNetworkOptions {
  readonly name: string;
  readonly namespace?: string;
  readonly bridge: string;
  readonly subnet: string;
  readonly cniVersion?: string;
  readonly extra?: Record<string, unknown>;
  readonly ipamExtra?: Record<string, unknown>;
}

export class DaemonFixture {
  readonly dir: string;
  readonly socket: string;
  readonly stateDir: string;
  readonly networksDir: string;
  private proc: ChildProcess | undefined;
  stderr = '';

  private extraFlags: string[];
  /**
   * A command plexusd is started under, e.g. `['ip', 'netns', 'exec', name]` for a simulated node in its own network
   * namespace; it must exec plexusd (not fork it), so the PID this fixture keeps and stops is plexusd's.
   */
  launcher: readonly string[] = [];

  /**
   * `defaultNetwork` "": no --default-network flag (a --config or --imported-config file names it). `settings` are
   * more flags by name (test/support/daemon-flags.ts), set after the fixture's own, so they win over them.
   */
  constructor(
    readonly defaultNetwork = 'podnet',
    settings: DaemonSettings = {},
  ) {
    this.extraFlags = daemonFlags(settings);
    this.dir = mkdtempSync(join(tmpdir(), 'plexus-e2e-'));
    this.socket = join(this.dir, 'run', 'plexus.sock');
    this.stateDir = join(this.dir, 'state');
    this.networksDir = join(this.dir, 'networks');
    mkdirSync(this.networksDir, { recursive: true });
  }

  /** More settings for the next start (e.g. a kubeconfig that exists only after the socket path had to be known). */
  addSettings(settings: DaemonSettings): void {
    this.extraFlags.push(...daemonFlags(settings));
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  /**
   * plexusd answers DEL before the kernel has deleted the links; the rest goes in the background. By default cni()
   * returns from a DEL only once that is done too (at most 10 s), so a test looks at what the DEL left, not at what
   * is still going. The tests of the background teardown itself turn this off.
   */
  settleDels = true;

  /** Whether the daemon this fixture started is still running. */
  get alive(): boolean {
    return this.proc !== undefined && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  writeNad(file: string, content: string): void {
    writeFileSync(join(this.networksDir, file), content);
  }

  /** The CNI config `config` (its `name` the NAD's) as a NetworkAttachmentDefinition of namespace default. */
  writeNadOf(config: { readonly name: string } & Record<string, unknown>): void {
    const nad = {
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name: config.name, namespace: 'default' },
      spec: { config: JSON.stringify(config) },
    };
    this.writeNad(`${config.name}.json`, JSON.stringify(nad));
  }

  writeBridgeNetwork(o: BridgeNetworkOptions): void {
    const config = {
      cniVersion: o.cniVersion ?? '1.1.0',
      name: o.name,
      type: 'bridge',
      bridge: o.bridge,
      isGateway: true,
      isDefaultGateway: true,
      ipam: { type: 'host-local', ranges: [[{ subnet: o.subnet }]], ...o.ipamExtra },
      ...o.extra,
    };
    const nad = {
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name: o.name, namespace: o.namespace ?? 'default' },
      spec: { config: JSON.stringify(config) },
    };
    this.writeNad(`${o.name}.json`, JSON.stringify(nad));
  }

  /** Starts plexusd and resolves when it is ready (within `readyTimeoutMs`). */
  async start(readyTimeoutMs = 15000): Promise<void> {
    const [command, ...before] = [...this.launcher, PLEXUSD];
    const proc = spawn(
      command,
      [
        ...before,
        ...daemonFlags({
          socket: this.socket,
          stateDir: this.stateDir,
          networksDir: this.networksDir,
          defaultNetwork: this.defaultNetwork || undefined,
          logLevel: 'warn',
          spoolScanSeconds: 0.5,
          // Not the host's /var/lib/cni/networks: host-local networks share their addresses with this directory.
          hostLocalDataDir: join(this.dir, 'cni-networks'),
        }),
        ...this.extraFlags,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    this.proc = proc;
    proc.stderr?.on('data', (c: Buffer) => (this.stderr += c.toString()));
    const deadline = Date.now() + readyTimeoutMs;
    for (;;) {
      // A signal's end (a test's kill, the OOM killer) leaves exitCode null: without signalCode it waits out the timeout.
      if (proc.exitCode !== null || proc.signalCode !== null)
        throw new Error(`plexusd exited with ${proc.exitCode ?? proc.signalCode}: ${this.stderr}`);
      try {
        // Ready means this process answers: during a replacement the old daemon may still be listening.
        const ready = await getJson(this.socket, '/readyz');
        if (ready.status === 200 && (ready.body as { pid?: number }).pid === proc.pid) return;
      } catch {
        /* not listening yet */
      }
      if (Date.now() > deadline) throw new Error(`plexusd not ready after ${readyTimeoutMs / 1000} s: ${this.stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Stops the daemon: SIGTERM (clean) or SIGKILL (crash). */
  async kill(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise<void>((r) => p.once('exit', () => r()));
    p.kill(signal);
    await exited;
    this.proc = undefined;
  }

  /**
   * A crash at a chosen moment: the daemon is frozen (SIGSTOP) while `moment()` looks at what it left on disk, then
   * killed (SIGKILL) if that is the moment, or let go on (SIGCONT) and looked at again 5 ms later. Checking a running
   * daemon and then killing it races with the daemon: on a slow machine the moment may pass in between. Resolves
   * with the first truthy value of `moment()` the kill kept; throws, the daemon killed all the same, when
   * `timeoutMs` pass without one, so that later steps never find the daemon frozen.
   */
  async killWhen<T>(moment: () => T | undefined | false, timeoutMs = 10000): Promise<T> {
    const p = this.proc;
    if (!p?.pid || p.exitCode !== null || p.signalCode !== null) throw new Error('no running daemon to kill');
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      p.kill('SIGSTOP');
      await stopped(p.pid);
      const seen = moment();
      if (seen || Date.now() > deadline) {
        await this.kill('SIGKILL');
        if (seen) return seen;
        throw new Error(`the moment to kill plexusd did not come in ${timeoutMs} ms`);
      }
      p.kill('SIGCONT');
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /**
   * A rolling upgrade: SIGTERM to the running daemon and at once a new one on the same socket and state dir.
   * Resolves when the new one is ready, with the old one's exit (code and signal) still to come.
   */
  async replace(): Promise<{ readonly oldExit: Promise<{ code: number | null; signal: NodeJS.Signals | null }> }> {
    const old = this.proc;
    if (!old) throw new Error('no daemon to replace');
    const oldExit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
      old.once('exit', (code, signal) => r({ code, signal })),
    );
    old.kill('SIGTERM');
    await this.start();
    return { oldExit };
  }

  /** The plexus entry of a runtime's CNI config for this daemon. */
  runtimeConfig(extra: Record<string, unknown> = {}, cniVersion = '1.1.0'): Record<string, unknown> {
    return { cniVersion, name: 'plexus', type: 'plexus-cni', socketPath: this.socket, ...extra };
  }

  /** Execs bin/plexus-cni the way containerd does (see settleDels). */
  async cni(call: ShimCall): Promise<ShimOutput> {
    const out = await this.execShim(call);
    if (this.settleDels && call.command === 'DEL' && out.code === 0 && call.containerId && call.ifname) {
      await this.teardownDone(call.containerId, call.ifname);
    }
    return out;
  }

  /** Waits (at most `ms`) until the record of a DEL'd attachment is gone or no longer says it is being deleted. */
  async teardownDone(containerId: string, ifname: string, ms = 10_000): Promise<void> {
    let name: string;
    try {
      name = `${containerId}@${encodeURIComponent(ifname)}.jsonl`;
    } catch {
      return; // not a name plexusd could have a record under (a lone surrogate, say)
    }
    const path = join(this.stateDir, 'journal', name);
    const deleting = (): boolean => {
      try {
        return readFileSync(path, 'utf8').includes('"t":"deleting"');
      } catch {
        return false;
      }
    };
    await holdsWithin(() => !deleting(), ms, 5);
  }

  private execShim(call: ShimCall): Promise<ShimOutput> {
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      CNI_COMMAND: call.command,
      CNI_PATH: '/usr/lib/cni',
    };
    if (call.containerId !== undefined) env.CNI_CONTAINERID = call.containerId;
    if (call.netns !== undefined) env.CNI_NETNS = call.netns;
    if (call.ifname !== undefined) env.CNI_IFNAME = call.ifname;
    if (call.args !== undefined) env.CNI_ARGS = call.args;
    for (const [k, v] of Object.entries(call.env ?? {})) {
      if (v === undefined) delete env[k];
      else env[k] = v;
    }
    const stdin = typeof call.config === 'string' ? call.config : JSON.stringify(call.config ?? this.runtimeConfig());
    return new Promise((resolvePromise, reject) => {
      const child = spawn(SHIM, [], { env, stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      child.on('error', reject);
      child.on('close', (code) => {
        let json: Record<string, unknown> | undefined;
        try {
          json = stdout.trim() ? (JSON.parse(stdout) as Record<string, unknown>) : undefined;
        } catch {
          json = undefined;
        }
        resolvePromise({ code, stdout, stderr, json });
      });
      child.stdin.end(stdin);
    });
  }

  journalFiles(): string[] {
    try {
      return readdirSync(join(this.stateDir, 'journal')).filter((n) => n.endsWith('.jsonl'));
    } catch {
      return [];
    }
  }

  /** Lease files of a network (round-robin hint files excluded). */
  leases(network: string): string[] {
    try {
      return readdirSync(join(this.stateDir, 'ipam', network)).filter(
        (n) => !n.startsWith('last_reserved') && !n.startsWith('.'),
      );
    } catch {
      return [];
    }
  }

  async stop(): Promise<void> {
    await this.kill('SIGTERM');
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** containerd's CNI_ARGS for a pod. */
export const podArgs = (name: string, containerId: string, namespace = 'default'): string =>
  `IgnoreUnknown=1;K8S_POD_NAMESPACE=${namespace};K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=${containerId};K8S_POD_UID=uid-${containerId}`;

/** A pod of an end-to-end test: its sandbox's container ID, name and network namespace. */
export interface TestPod {
  readonly cid: string;
  readonly name: string;
  /** The namespace's path (CNI_NETNS) and its name (for `ip -n`). */
  readonly netns: string;
  readonly ns: string;
}

/**
 * Makes pods numbered 1, 2, … in namespaces of `fx`, with the host veths of the given pod interfaces tracked, so the
 * fixture removes whatever a failed test left.
 */
export function podMaker(fx: NetnsFixture, prefix: string, hostVethsOf: readonly string[]): () => TestPod {
  let n = 0;
  return () => {
    const i = ++n;
    const ns = fx.create(`p${i}`);
    const cid = `${prefix}c${i}`;
    for (const ifname of hostVethsOf) fx.trackHostLink(hostVethName(cid, 'eth0', ifname));
    return { cid, name: `pod${i}`, netns: ns.path, ns: ns.name };
  };
}

/** ADD or DEL of a pod, as containerd sends it (CNI_IFNAME eth0, the pod's CNI_ARGS). */
/** What a call may change of a pod's usual request: another netns or container ID, other CNI_ARGS, or none (null). */
export interface PodCallOverrides {
  readonly netns?: string;
  readonly cid?: string;
  readonly args?: string | null;
}

export function podCall(
  daemon: DaemonFixture,
  command: 'ADD' | 'DEL' | 'CHECK',
  pod: TestPod,
  config: Record<string, unknown>,
  over: PodCallOverrides = {},
): Promise<ShimOutput> {
  const cid = over.cid ?? pod.cid;
  return daemon.cni({
    command,
    containerId: cid,
    netns: over.netns ?? pod.netns,
    ifname: 'eth0',
    ...(over.args === null ? {} : { args: over.args ?? podArgs(pod.name, cid) }),
    config,
  });
}

/** Resolves once the process is stopped by a signal (state T in /proc/PID/stat), or gone. */
async function stopped(pid: number): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      return; // gone
    }
    // The state follows the command name, which is in parentheses and may itself hold any character.
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    if (state === 'T' || state === 't' || state === 'Z' || state === 'X') return;
    await new Promise((r) => setTimeout(r, 1));
  }
  throw new Error(`process ${pid} did not stop`);
}
