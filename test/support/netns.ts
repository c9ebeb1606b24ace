/**
 * Test fixtures: real network namespaces and host links with unique names, always removed afterwards.
 * Tests may use iproute2 to set up and inspect; product code never does.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

/** A short unique prefix for everything one test file creates, so parallel runs never collide. */
export const uniquePrefix = (tag: string): string => `${tag}${randomBytes(3).toString('hex')}`;

export const ip = (...args: string[]): string => execFileSync('ip', args, { encoding: 'utf8' });
/**
 * A NIC's stand-in in network namespace `netns`: a veth `name` whose peer `peer`, kept up beside it, gives it carrier
 * (the test kernels have no dummy module); both up. It goes with the namespace.
 */
export function addNicStandIn(netns: string, name: string, peer: string): void {
  ip('-n', netns, 'link', 'add', name, 'type', 'veth', 'peer', 'name', peer);
  ip('-n', netns, 'link', 'set', 'dev', peer, 'up');
  ip('-n', netns, 'link', 'set', 'dev', name, 'up');
}

export const ipTry = (...args: string[]): { status: number | null; out: string } => {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  return { status: r.status, out: r.stdout + r.stderr };
};

export interface TestNetns {
  readonly name: string;
  readonly path: string;
  exec(cmd: string, ...args: string[]): { status: number | null; out: string };
}

/** Tracks every namespace and host link a test creates and removes them all in `cleanup()`. */
export class NetnsFixture {
  private readonly namespaces: string[] = [];
  private readonly hostLinks: string[] = [];

  constructor(readonly prefix: string) {}

  create(suffix: string): TestNetns {
    const name = `${this.prefix}-${suffix}`;
    ip('netns', 'add', name);
    this.namespaces.push(name);
    ip('-n', name, 'link', 'set', 'lo', 'up');
    return {
      name,
      path: `/var/run/netns/${name}`,
      exec: (cmd, ...args) => {
        const r = spawnSync('ip', ['netns', 'exec', name, cmd, ...args], { encoding: 'utf8' });
        return { status: r.status, out: r.stdout + r.stderr };
      },
    };
  }

  /** Registers a host link the test created (or caused to be created) so cleanup removes it if it is still there. */
  trackHostLink(name: string): void {
    this.hostLinks.push(name);
  }

  cleanup(): void {
    for (const ns of this.namespaces.splice(0)) ipTry('netns', 'del', ns);
    for (const link of this.hostLinks.splice(0)) ipTry('link', 'del', link);
  }
}

/** The link names in `ip -o link show` output (without the `@peer` suffix). */
const linkNames = (output: string): string[] =>
  output
    .split('\n')
    .map((l) => l.split(':')[1]?.trim().split('@')[0] ?? '')
    .filter(Boolean);

/** Host links whose name starts with the prefix (to assert nothing leaked). */
export function hostLinksWithPrefix(prefix: string): string[] {
  return linkNames(ip('-o', 'link', 'show')).filter((n) => n.startsWith(prefix));
}

/** The links in a network namespace (by name) other than lo, sorted: what a pod was given, or left with. */
export function podLinks(netnsName: string): string[] {
  return linkNames(ip('-n', netnsName, '-o', 'link', 'show'))
    .filter((n) => n !== 'lo')
    .sort();
}
