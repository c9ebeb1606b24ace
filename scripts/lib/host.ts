/**
 * The host as the scripts see it, through iproute2: network namespaces, links and addresses.
 * Only names carrying the script's own prefix (or links the script's pods caused) are ever changed.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, release } from 'node:os';
import type { Teardown } from './teardown';

/** `pxb` + 4 hex: short enough that `<prefix>rb` is a valid interface name (15 bytes max). */
export const uniquePrefix = (tag: string): string => `${tag}${randomBytes(2).toString('hex')}`;

export interface Run {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export function run(cmd: string, args: readonly string[], input?: string): Run {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...(input !== undefined ? { input } : {}) });
  if (r.error) return { status: null, stdout: '', stderr: r.error.message };
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Runs `ip ...` and throws with its stderr when it fails. */
export function ip(...args: string[]): string {
  const r = run('ip', args);
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim() || `exit ${String(r.status)}`}`);
  return r.stdout;
}

/** Runs many `ip` commands in one process (`ip -batch`), which is much faster than one exec each. */
export function ipBatch(lines: readonly string[], force = false): Run {
  if (lines.length === 0) return { status: 0, stdout: '', stderr: '' };
  return run('ip', [...(force ? ['-force'] : []), '-batch', '-'], `${lines.join('\n')}\n`);
}

export const netnsPath = (name: string): string => `/var/run/netns/${name}`;

/** Creates the namespaces and registers their deletion; returns their paths in order. */
export function createNetns(teardown: Teardown, names: readonly string[]): string[] {
  teardown.add(`delete ${names.length} netns`, () => deleteNetns(names));
  const r = ipBatch(names.map((n) => `netns add ${n}`));
  if (r.status !== 0) throw new Error(`ip netns add: ${r.stderr.trim()}`);
  return names.map(netnsPath);
}

/** Deletes the namespaces that still exist (a pod's veth peer goes with its namespace). */
export function deleteNetns(names: readonly string[]): void {
  const present = new Set(listNetns(''));
  const r = ipBatch(
    names.filter((n) => present.has(n)).map((n) => `netns del ${n}`),
    true,
  );
  if (r.status !== 0) throw new Error(`ip netns del: ${r.stderr.trim()}`);
}

export function listNetns(prefix: string): string[] {
  return ip('netns', 'list')
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => n !== '' && n.startsWith(prefix));
}

/** Names of the host's links (without the `@peer` suffix). */
export function hostLinks(): Set<string> {
  return new Set(
    ip('-o', 'link', 'show')
      .split('\n')
      .map((l) => l.split(':')[1]?.trim().split('@')[0] ?? '')
      .filter((n) => n !== ''),
  );
}

/** `-n <netns>` for an `ip` command run in that network namespace; nothing for the host's. */
const inNetns = (netns?: string): string[] => (netns !== undefined ? ['-n', netns] : []);

export const linkExists = (name: string, netns?: string): boolean =>
  run('ip', [...inNetns(netns), 'link', 'show', 'dev', name]).status === 0;

/** Links enslaved to a bridge, on the host or in `netns` (a node's); empty when the bridge does not exist. */
export function linksOfBridge(bridge: string, netns?: string): string[] {
  if (!linkExists(bridge, netns)) return [];
  return ip(...inNetns(netns), '-o', 'link', 'show', 'master', bridge)
    .split('\n')
    .map((l) => l.split(':')[1]?.trim().split('@')[0] ?? '')
    .filter((n) => n !== '');
}

/** Deletes a host link the script created (or its pods caused), if it is still there. */
export function deleteLinkIfPresent(name: string): void {
  if (linkExists(name)) ip('link', 'del', 'dev', name);
}

/** Picks 10.<second>.0.0 with `second` in [lo, hi] that no host address or route uses yet. */
export function freeTenNet(lo: number, hi: number, avoid: readonly number[] = []): number {
  const used = `${ip('-o', '-4', 'addr', 'show')}\n${ip('-o', '-4', 'route', 'show', 'table', 'all')}`;
  for (let attempt = 0; attempt < 200; attempt++) {
    const second = randomInt(lo, hi + 1);
    if (avoid.includes(second)) continue;
    if (!new RegExp(`\\b10\\.${second}\\.`).test(used) && !/\b10\.0\.0\.0\/8\b/.test(used)) return second;
  }
  throw new Error(`no free 10.x.0.0/16 with x in ${lo}..${hi}`);
}

/**
 * The reference bridge plugin turns on IP forwarding when it is the gateway. Put the host's
 * sysctls back as they were when the script started.
 */
export function restoreForwardingOnTeardown(teardown: Teardown): void {
  const knobs = ['/proc/sys/net/ipv4/ip_forward', '/proc/sys/net/ipv6/conf/all/forwarding'].filter((p) =>
    existsSync(p),
  );
  const before = knobs.map((p) => [p, readFileSync(p, 'utf8')] as const);
  teardown.add('restore IP forwarding sysctls', () => {
    for (const [path, value] of before) if (readFileSync(path, 'utf8') !== value) writeFileSync(path, value);
  });
}

export interface Machine {
  readonly cpus: number;
  readonly cpuModel: string;
  readonly kernel: string;
  readonly node: string;
}

export const machine = (): Machine => ({
  cpus: availableParallelism(),
  cpuModel: cpus()[0]?.model.trim() ?? 'unknown',
  kernel: release(),
  node: process.version,
});

/** The 1-minute load average, to one decimal: benchmarks on a shared machine print it at their start and end. */
export const loadAverage = (): number => Math.round((loadavg()[0] ?? 0) * 10) / 10;

/** Names of the links inside a network namespace other than `lo` (what a pod still has after its DEL). */
export function podLinks(netnsName: string): string[] {
  return ip('-n', netnsName, '-o', 'link', 'show')
    .split('\n')
    .map((l) => l.split(':')[1]?.trim().split('@')[0] ?? '')
    .filter((n) => n !== '' && n !== 'lo');
}

/**
 * A veth pair standing in for a host uplink (a macvlan master), both ends up; its deletion (which takes the peer
 * along) is registered first.
 */
export function createUplink(teardown: Teardown, name: string, peer: string): void {
  teardown.add(`delete uplink ${name}`, () => {
    deleteLinkIfPresent(name);
    deleteLinkIfPresent(peer);
  });
  ip('link', 'add', name, 'type', 'veth', 'peer', 'name', peer);
  ip('link', 'set', name, 'up');
  ip('link', 'set', peer, 'up');
}

/**
 * A VXLAN network identity nothing on the host uses: the VTEP Plexus will create is named `vx<vni>` (no prefix of
 * ours), so pick a VNI whose name is free and a UDP port no socket and no VXLAN device holds.
 */
export function freeVxlan(): { vni: number; port: number; vtep: string } {
  const details = ip('-d', '-o', 'link', 'show');
  const udp = run('ss', ['-Hlun']).stdout;
  for (let attempt = 0; attempt < 200; attempt++) {
    const vni = randomInt(100_000, 16_000_000);
    const port = randomInt(40_000, 60_000);
    const vtep = `vx${vni}`;
    if (
      details.includes(`${vtep}:`) ||
      new RegExp(`vxlan id ${vni}\\b`).test(details) ||
      new RegExp(`dstport ${port}\\b`).test(details)
    )
      continue;
    if (new RegExp(`:${port}\\s`).test(udp)) continue;
    return { vni, port, vtep };
  }
  throw new Error('no free VXLAN id and port');
}

/** Deletes `vx<vni>` only if it is the VXLAN device of that VNI and port (so a stranger's link is never touched). */
export function deleteVtepIfOurs(vtep: string, vni: number, port: number): boolean {
  const r = run('ip', ['-d', '-o', 'link', 'show', 'dev', vtep]);
  if (r.status !== 0) return false;
  if (!new RegExp(`vxlan id ${vni}\\b`).test(r.stdout) || !new RegExp(`dstport ${port}\\b`).test(r.stdout)) {
    throw new Error(`${vtep} exists but is not the VXLAN device of vni ${vni} port ${port}; left alone`);
  }
  ip('link', 'del', 'dev', vtep);
  return true;
}
