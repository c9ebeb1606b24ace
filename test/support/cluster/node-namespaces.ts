/**
 * What makes one process tree a node of its own on a shared machine (../shared/k8s/NOTES.md section 12): a network
 * namespace with uplinks to the host's test bridge, a mount namespace kept by a holder process (fresh sysfs, the
 * cgroup tree bound back, per-node directories over the paths the kubelet and containerd hard-code), and a cgroup
 * root in every hierarchy (cgroup v1). Everything here is undone by its own remove/stop, deepest first.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ip, ipTry } from '../netns';

/** Paths containerd and the kubelet use whatever their flags say; each node has its own copy of each. */
export const NODE_BOUND_PATHS = [
  '/var/lib/kubelet',
  '/var/log/containers',
  '/var/lib/cni',
  '/run/netns',
  '/run/containerd',
];

/**
 * The host paths deploy/'s DaemonSet mounts (hostPath volumes), each bound over by the node's own directory under its
 * root, the one NodePaths names: the DaemonSet's pod and a plexusd the test starts see the same files, and one set of
 * host paths serves every node. /var/run/... is /run/... on these hosts; the rest of deploy/'s paths lie under
 * /var/lib/kubelet and /var/lib/cni, bound above.
 */
export const NODE_OWN_PATHS: Readonly<Record<string, string>> = {
  '/etc/cni/net.d': 'etc/cni/net.d',
  '/opt/cni/bin': 'opt/cni/bin',
  '/run/plexus': 'run/plexus',
  '/var/lib/plexus': 'var/lib/plexus',
  '/run/k8s.cni.cncf.io': 'run/k8s.cni.cncf.io',
  '/run/cdi': 'run/cdi',
  '/run/openvswitch': 'run/openvswitch',
};

/**
 * Makes the NODE_BOUND_PATHS and NODE_OWN_PATHS missing on the host (another test's kubelet may have taken one away),
 * as empty mount points; answers the directories made, for removeMountPoints.
 */
export function makeMountPoints(): string[] {
  const made: string[] = [];
  for (const path of [...NODE_BOUND_PATHS, ...Object.keys(NODE_OWN_PATHS)]) {
    for (let d = path; d !== '/' && !existsSync(d); d = dirname(d)) made.push(d);
    mkdirSync(path, { recursive: true });
  }
  return made;
}

/** Removes the mount points makeMountPoints made, deepest first, each only if empty; answers those that stayed. */
export function removeMountPoints(made: readonly string[]): string[] {
  const problems: string[] = [];
  for (const d of [...new Set(made)].sort((a, b) => b.length - a.length)) {
    try {
      rmdirSync(d);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') problems.push(`mount point ${d}: ${(e as Error).message}`);
    }
  }
  return problems;
}

export interface UplinkPlan {
  /** The host bridge the uplinks are ports of. */
  readonly bridge: string;
  /** Host-side names of the node's two veths (uplink0, uplink1 inside). */
  readonly hostEnds: readonly [string, string];
  /** uplink0's address with its prefix length, and the default route's gateway. */
  readonly address: string;
  readonly gateway: string;
}

/** The node's network namespace: uplink0 (addressed, default route) and uplink1 (a bare port), ip_forward on. */
export function makeNodeNetns(name: string, plan: UplinkPlan): void {
  ip('netns', 'add', name);
  ip('-n', name, 'link', 'set', 'lo', 'up');
  plan.hostEnds.forEach((hostEnd, i) => {
    ip('link', 'add', hostEnd, 'type', 'veth', 'peer', 'name', `uplink${i}`, 'netns', name);
    ip('link', 'set', hostEnd, 'master', plan.bridge, 'up');
    ip('-n', name, 'link', 'set', `uplink${i}`, 'up');
  });
  ip('-n', name, 'addr', 'add', plan.address, 'dev', 'uplink0');
  ip('-n', name, 'route', 'add', 'default', 'via', plan.gateway);
  ip('netns', 'exec', name, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1');
}

/** Deletes the namespace and the host ends of its uplinks (each may be gone already). */
export function removeNodeNetns(name: string, plan: UplinkPlan): string[] {
  const problems: string[] = [];
  for (const hostEnd of plan.hostEnds) {
    const r = ipTry('link', 'del', hostEnd);
    if (r.status !== 0 && !/Cannot find device/.test(r.out)) problems.push(`link ${hostEnd}: ${r.out.trim()}`);
  }
  const r = ipTry('netns', 'del', name);
  if (r.status !== 0 && !/No such file/.test(r.out)) problems.push(`netns ${name}: ${r.out.trim()}`);
  return problems;
}

/**
 * The script the holder runs inside a new mount namespace (propagation slave: the host's later mounts still show,
 * the node's never leak out): sysfs of the node's netns with the cgroup tree bound back over it, then the node's own
 * directories over NODE_BOUND_PATHS and NODE_OWN_PATHS. /run/netns is made shared inside the node (it stays the host's
 * slave): the sandboxes' namespaces containerd mounts there later reach a container that mounts it HostToContainer,
 * as the DaemonSet's plexusd does. It prints "ready" and sleeps until killed.
 */
function holderScript(root: string): string {
  const aside = join(root, 'cgroup-aside');
  const lines = [
    'set -e',
    `mkdir -p ${aside}`,
    `mount --rbind /sys/fs/cgroup ${aside}`,
    'mount -t sysfs sysfs /sys',
    `mount --rbind ${aside} /sys/fs/cgroup`,
    ...NODE_BOUND_PATHS.map((p) => `mount --bind ${boundSource(root, p)} ${p}`),
    ...Object.entries(NODE_OWN_PATHS).flatMap(([p, own]) => [
      `mkdir -p ${join(root, own)}`,
      `mount --bind ${join(root, own)} ${p}`,
    ]),
    'mount --make-shared /run/netns',
    'echo ready',
    'exec sleep infinity',
  ];
  return lines.join('\n');
}

/** The node's directory that stands for a hard-coded path inside its mount namespace. */
export const boundSource = (root: string, path: string): string => join(root, 'bound', path.replace(/\//g, '_'));

/** Starts the holder of a node's mount namespace, in its netns; resolves once its mounts are made. */
export function startHolder(netns: string, root: string): Promise<ChildProcess> {
  for (const p of NODE_BOUND_PATHS) mkdirSync(boundSource(root, p), { recursive: true });
  const args = [`--net=/var/run/netns/${netns}`, 'unshare', '--mount', '--propagation', 'slave'];
  const proc = spawn('nsenter', [...args, 'sh', '-c', holderScript(root)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  return new Promise((done, fail) => {
    const onData = (d: Buffer): void => {
      out += d.toString();
      if (out.includes('ready\n')) {
        proc.stdout?.off('data', onData);
        proc.off('exit', onExit);
        done(proc);
      }
    };
    const onExit = (code: number | null): void =>
      fail(new Error(`the mount namespace's holder exited ${code}: ${out}`));
    proc.stdout?.on('data', onData);
    proc.stderr?.on('data', (d: Buffer) => (out += d.toString()));
    proc.once('exit', onExit);
  });
}

const mountNsOf = (pid: number | string): string | undefined => {
  try {
    return readlinkSync(`/proc/${pid}/ns/mnt`);
  } catch {
    return undefined;
  }
};

/** The v1 hierarchies (and the unified one) of this machine: where a node's cgroup root must exist. */
function cgroupHierarchies(): string[] {
  return readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .map((l) => l.split(' '))
    .filter((f) => f[2] === 'cgroup' || f[2] === 'cgroup2')
    .map((f) => f[1]!);
}

/** The node's cgroup root (`/<node>`) in every hierarchy; cpuset's with its parent's cpus and mems, as it must. */
export function makeCgroupRoot(name: string): void {
  for (const h of cgroupHierarchies()) {
    const dir = join(h, name);
    if (!existsSync(dir)) mkdirSync(dir);
    for (const knob of ['cpuset.cpus', 'cpuset.mems'])
      if (existsSync(join(h, knob))) writeFileSync(join(dir, knob), readFileSync(join(h, knob)));
  }
}

/** Directories of the node's cgroup root, every hierarchy, deepest first. */
function cgroupDirs(name: string): string[] {
  const dirs: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(join(d, e.name));
    dirs.push(d);
  };
  for (const h of cgroupHierarchies()) if (existsSync(join(h, name))) walk(join(h, name));
  return dirs;
}

/** PIDs in the node's cgroups: its pods' processes. */
function cgroupPids(name: string): number[] {
  const pids = new Set<number>();
  for (const d of cgroupDirs(name)) {
    try {
      for (const l of readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n')) if (l) pids.add(Number(l));
    } catch {
      /* gone meanwhile */
    }
  }
  return [...pids];
}

/**
 * Every process of a node: those in its mount namespace (containerd, the kubelet, plexusd, the shims, the holder)
 * and those in its cgroups (its pods). `mountNs` is the holder's, read while it ran.
 */
export function nodeProcesses(mountNs: string | undefined, cgroupRoot: string): number[] {
  const pids = new Set(cgroupPids(cgroupRoot));
  if (mountNs) {
    for (const e of readdirSync('/proc'))
      if (/^\d+$/.test(e) && Number(e) !== process.pid && mountNsOf(e) === mountNs) pids.add(Number(e));
  }
  return [...pids];
}

export const holderMountNs = (holder: ChildProcess): string | undefined =>
  holder.pid ? mountNsOf(holder.pid) : undefined;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** SIGKILL to every process of the node, until none is left (5 s at most); answers what is left. */
export async function killNodeProcesses(mountNs: string | undefined, cgroupRoot: string): Promise<number[]> {
  for (let i = 0; i < 50; i++) {
    const left = nodeProcesses(mountNs, cgroupRoot);
    if (left.length === 0) return [];
    for (const pid of left) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone already */
      }
    }
    await sleep(100);
  }
  return nodeProcesses(mountNs, cgroupRoot);
}

/** Removes the node's cgroup root, deepest first; answers the directories that stayed. */
export function removeCgroupRoot(name: string): string[] {
  const problems: string[] = [];
  for (const d of cgroupDirs(name)) {
    try {
      rmdirSync(d);
    } catch (e) {
      problems.push(`cgroup ${d}: ${(e as Error).message}`);
    }
  }
  return problems;
}

/** A command run inside the node's namespaces (network and mount) through its holder. */
export function inNode(
  holderPid: number,
  command: readonly string[],
  timeoutMs = 30000,
): { status: number | null; out: string } {
  const r = spawnSync('nsenter', ['-t', String(holderPid), '-m', '-n', '--', ...command], {
    encoding: 'utf8',
    timeout: timeoutMs,
  });
  return { status: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
}
