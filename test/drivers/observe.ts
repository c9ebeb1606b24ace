/**
 * What a pod and its node can observe of one attachment, for the differential tests that ADD the same config through
 * a reference plugin and through Plexus, each into a node and a pod netns of its own: the pod's interface (link
 * attributes, addresses, routes, sysctls), the host side (its link and bridge port flags and VLANs), the bridge, the
 * node's forwarding sysctls, and the CNI result. Names, random MACs and netns paths that differ between the two sides
 * by construction are replaced by placeholders; what is left must be equal.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import type { TestNetns } from '../support/netns';

export interface ObservedSide {
  /** The netns standing for the node (where the bridge and the host ends live). */
  readonly node: TestNetns;
  readonly pod: TestNetns;
  readonly ifname: string;
  readonly bridge?: string;
  /** The CNI result of the ADD. */
  readonly result: unknown;
  /** MACs the config asked for: kept, where every other MAC is a placeholder. */
  readonly keepMacs?: readonly string[];
}

/** Keys whose values differ from one run to the next whatever the plugin does (indices, timers, counters). */
const VOLATILE = new Set([
  'ifindex',
  'link_index',
  'link_netnsid',
  'bridge_id',
  'root_id',
  'designated_port',
  'designated_cost',
  'hold_timer',
  'message_age_timer',
  'forward_delay_timer',
  'hello_timer',
  'tcn_timer',
  'topology_change_timer',
  'gc_timer',
  'id',
  'no',
  'stats',
  'stats64',
  'altnames',
]);

const json = (netns: string, cmd: string, ...args: string[]): unknown =>
  JSON.parse(execFileSync(cmd, ['-n', netns, '-j', ...args], { encoding: 'utf8' }) || 'null');

/** The values of sysctls under /proc/sys in a netns (missing ones as "-"). */
function sysctls(netns: string, keys: readonly string[]): Record<string, string> {
  const script = keys.map((k) => `cat /proc/sys/${k.replaceAll('.', '/')} 2>/dev/null || echo -`).join('; ');
  const out = spawnSync('ip', ['netns', 'exec', netns, 'sh', '-c', script], { encoding: 'utf8' }).stdout.split('\n');
  return Object.fromEntries(keys.map((k, i) => [k, out[i]?.trim() ?? '-']));
}

/** The host ends of the side's pod: the node's veths (other than those the test made). */
function hostEnds(node: string): string[] {
  const links = json(node, 'ip', '-d', 'link', 'show', 'type', 'veth') as { ifname: string }[];
  return links.map((l) => l.ifname);
}

/** One line per observed fact: `path = value`, or `path[] {element}` for a list whose order says nothing. */
export type Observation = readonly string[];
interface AddrLink {
  readonly operstate: string;
  readonly addr_info: readonly { readonly tentative?: boolean }[];
}
const busy = (netns: string): boolean =>
  (json(netns, 'ip', 'addr', 'show') as AddrLink[]).some(
    (l) => l.operstate === 'UP' && l.addr_info.some((a) => a.tentative),
  );

/**
 * Waits (at most 3 s) for the state the kernel works out after a change to settle: the bridge's operational state
 * following its ports, and IPv6 duplicate address detection on links that are up. A plugin that answers sooner than
 * another would otherwise show an older state.
 */
function settled(side: ObservedSide): void {
  const deadline = Date.now() + 3000;
  const { node, pod, bridge } = side;
  const bridgeState = (): string | undefined =>
    bridge ? (json(node.name, 'ip', 'link', 'show', 'dev', bridge) as { operstate: string }[])[0]?.operstate : 'UP';
  while ((bridgeState() === 'UNKNOWN' || busy(node.name) || busy(pod.name)) && Date.now() < deadline)
    spawnSync('sleep', ['0.05']);
}

/** Everything observable of one side, placeholders in. */
export function observe(side: ObservedSide): Observation {
  const { node, pod, ifname, bridge } = side;
  settled(side);
  const hosts = hostEnds(node.name);
  const names = new Map<string, string>([
    [pod.path, 'POD'],
    [node.path, 'NODE'],
    ...hosts.map((h, i): [string, string] => [h, `HOST${i}`]),
    ...(bridge ? [[bridge, 'BRIDGE'] as [string, string]] : []),
  ]);
  const raw = {
    pod: {
      link: json(pod.name, 'ip', '-d', 'link', 'show', 'dev', ifname),
      addrs: json(pod.name, 'ip', 'addr', 'show', 'dev', ifname),
      routes4: json(pod.name, 'ip', '-4', 'route', 'show', 'table', 'all'),
      routes6: json(pod.name, 'ip', '-6', 'route', 'show', 'table', 'all'),
      neighbours: json(pod.name, 'ip', 'neigh', 'show', 'nud', 'permanent'),
      sysctls: sysctls(pod.name, [
        `net.ipv4.conf.${ifname}.arp_notify`,
        `net.ipv6.conf.${ifname}.accept_dad`,
        `net.ipv6.conf.${ifname}.enhanced_dad`,
        `net.ipv6.conf.${ifname}.disable_ipv6`,
        `net.ipv6.conf.${ifname}.accept_ra`,
        `net.ipv6.conf.${ifname}.keep_addr_on_down`,
        'net.ipv6.conf.lo.disable_ipv6',
      ]),
    },
    host: Object.fromEntries(
      hosts.map((h) => [
        h,
        {
          link: json(node.name, 'ip', '-d', 'link', 'show', 'dev', h),
          addrs: json(node.name, 'ip', 'addr', 'show', 'dev', h),
          vlans: json(node.name, 'bridge', 'vlan', 'show', 'dev', h),
        },
      ]),
    ),
    bridge: bridge
      ? {
          link: json(node.name, 'ip', '-d', 'link', 'show', 'dev', bridge),
          addrs: json(node.name, 'ip', 'addr', 'show', 'dev', bridge),
          vlans: json(node.name, 'bridge', 'vlan', 'show', 'dev', bridge),
          sysctls: sysctls(node.name, [`net.ipv6.conf.${bridge}.accept_ra`]),
        }
      : null,
    node: {
      sysctls: sysctls(node.name, ['net.ipv4.ip_forward', 'net.ipv6.conf.all.forwarding']),
      routes4: json(node.name, 'ip', '-4', 'route', 'show', 'table', 'all'),
    },
    result: side.result,
  };
  return flatten('', normalize(raw, names, new Set(side.keepMacs ?? [])))
    .filter((line) => !POD_LINK_GROUP.test(line))
    .sort();
}

/** Plexus marks each pod link it makes with its attachment's link group (docs/networks.md); the reference leaves 0. */
const POD_LINK_GROUP = /^pod\.(link|addrs)\[[^\]]+\]\.group = /;

const MAC = /\b[0-9a-f]{2}(:[0-9a-f]{2}){5}\b/g;

function normalize(value: unknown, names: ReadonlyMap<string, string>, keepMacs: ReadonlySet<string>): unknown {
  let text = JSON.stringify(value);
  // Longest first, so a name that contains another is replaced whole.
  for (const [from, to] of [...names].sort((a, b) => b[0].length - a[0].length)) text = text.replaceAll(from, to);
  text = text.replace(MAC, (m) => (keepMacs.has(m) || m === 'ff:ff:ff:ff:ff:ff' ? m : 'MAC'));
  // A link-local address is made of the MAC.
  text = text.replace(/fe80::[0-9a-f:]+/g, 'fe80::LL');
  return JSON.parse(text, (key, v: unknown) => (VOLATILE.has(key) ? undefined : v));
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Links (objects with an ifname) are followed by name, other lists become one line per element. */
function flatten(path: string, value: unknown): string[] {
  if (Array.isArray(value)) {
    if (value.every((e) => isObject(e) && typeof e.ifname === 'string'))
      return value.flatMap((e: Record<string, unknown>) => flatten(`${path}[${String(e.ifname)}]`, e));
    return value.map((e) => `${path}[] ${stableJson(e)}`);
  }
  if (isObject(value)) return Object.entries(value).flatMap(([k, v]) => flatten(path ? `${path}.${k}` : k, v));
  return [`${path} = ${JSON.stringify(value)}`];
}

const stableJson = (v: unknown): string =>
  JSON.stringify(v, (_k, x: unknown) =>
    isObject(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => a.localeCompare(b))) : x,
  );

/** What one side shows and the other does not: `- ` the reference's lines, `+ ` Plexus's. */
export function differences(reference: Observation, plexus: Observation): string[] {
  const ref = new Set(reference);
  const ours = new Set(plexus);
  return [
    ...reference.filter((l) => !ours.has(l)).map((l) => `- ${l}`),
    ...plexus.filter((l) => !ref.has(l)).map((l) => `+ ${l}`),
  ];
}
