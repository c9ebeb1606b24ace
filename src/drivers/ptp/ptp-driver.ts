/**
 * The native `ptp` driver: the reference ptp plugin's behaviour, run in-process. A veth connects the pod to the
 * node with no bridge: the pod's interface is born in its netns with its final name, every packet leaves the pod
 * through its gateway, and the node routes each pod address to the pod's host veth.
 *
 * Pod side, per address: the address, the kernel's subnet route deleted, "<gateway>/32 dev <if> scope link" so the
 * gateway answers ARP on this link, "<subnet> via <gateway>", then IPAM's routes. Host side: the gateway address
 * (/32 or /128) on the host veth, and "<pod ip>/32 dev <host veth> scope host". Deleting the veth removes all of it.
 */
import { type Result, err, ok } from '../../cni/errors';
import type { CniInterface, CniResult, CniRoute } from '../../cni/types';
import { formatCidr, networkOf, parseCidr } from '../../common/ip';
import type { BatchOp } from '../../kernel/types';
import { allocatePodIps } from '../common';
import { prepareHostVeth } from '../common/host-veth';
import { invalidConfig } from '../common/config';
import { plumbPodInterface, podResult, podRoutes } from '../common/pod-interface';
import { hasIpv6Gateway, settleLikeConfigureIface } from '../common/dad';
import { kernelError } from '../common/kernel-error';
import { ipamRoutes, ipv6EnableSysctls } from '../common/pod-sysctls';
import { onePlugin, type AttachRequest, type Driver, type DriverEnv, type NodeOption } from '../driver';
import { parsePtpConfig, type PtpConfig } from './config';
import { definedFields } from '../../common/defined-fields';

const hostBits = (address: string): number => (address.includes(':') ? 128 : 32);

/** The subnet of an address in CIDR form: 10.1.2.3/24 -> 10.1.2.0/24. */
function subnetOf(cidr: string): string {
  const c = parseCidr(cidr);
  return c ? formatCidr(c.family, networkOf(c), c.prefix) : cidr;
}

/** What a ptp driver keeps: where the node is, and which forwarding sysctls it has set there. */
interface PtpNode {
  readonly node: string | undefined;
  /** IP forwarding is what makes a routed pod reachable beyond the node; set once per family per driver. */
  readonly forwardingEnabled: Set<string>;
}

/** A ptp driver; it remembers which forwarding sysctls it has set. */
export function createPtpDriver({ node }: NodeOption = {}): Driver<PtpConfig> {
  const known: PtpNode = { node, forwardingEnabled: new Set() };
  return {
    type: 'ptp',
    capabilities: ['ips', 'mac', 'dns'],
    parse: onePlugin(parsePtpConfig),
    attach: (req, conf, env) => attachPtp(req, conf, env, known),
  };
}

async function attachPtp(
  req: AttachRequest,
  conf: PtpConfig,
  env: DriverEnv,
  { node, forwardingEnabled }: PtpNode,
): Promise<Result<CniResult>> {
  const allocated = await allocatePodIps(req, env, conf.ipam);
  if (!allocated.ok) return allocated;
  const ipam = allocated.value;
  if (!ipam?.ips.length) return err(invalidConfig(req.plugin, 'IPAM assigned no address, and a ptp link needs one'));
  const missing = ipam.ips.find((ip) => !ip.gateway);
  if (missing)
    return err(
      invalidConfig(
        req.plugin,
        `IPAM gave ${missing.address} no gateway, and ptp routes everything through it`,
        'set "gateway" in the IPAM range',
      ),
    );

  const veth = await prepareHostVeth(req, env, definedFields({ mtu: conf.mtu || undefined, node: node || undefined }));
  const host = veth.name;
  const at = req.netns;
  const gatewayRoutes: BatchOp[] = [];
  const hostSide: BatchOp[] = [];
  for (const ip of ipam.ips) {
    const [address = ''] = ip.address.split('/');
    const bits = hostBits(address);
    const gateway = ip.gateway!;
    gatewayRoutes.push(
      // The kernel's route to the subnet goes, as the reference deletes it: the subnet is reached via the gateway.
      { op: 'routeDel', route: { dst: subnetOf(ip.address), dev: req.ifname }, at },
      { op: 'routeAdd', route: { dst: `${gateway}/${bits}`, dev: req.ifname, scope: 'link', src: address }, at },
      {
        op: 'routeAdd',
        route: { dst: subnetOf(ip.address), gw: gateway, dev: req.ifname, src: address },
        ignore: ['EEXIST'],
        at,
      },
    );
    hostSide.push(
      { op: 'addrAdd', name: host, address: `${gateway}/${bits}`, ignore: ['EEXIST'] },
      { op: 'routeAdd', route: { dst: `${address}/${bits}`, dev: host, scope: 'host' }, ignore: ['EEXIST'] },
    );
  }
  for (const family of new Set(ipam.ips.map((ip) => hostBits(ip.address)))) {
    const key = family === 32 ? 'net.ipv4.ip_forward' : 'net.ipv6.conf.all.forwarding';
    if (!forwardingEnabled.has(key)) hostSide.push({ op: 'sysctlWrite', key, value: '1' });
  }
  // As the reference: IPv6 addresses pass DAD before the routes that name them as their source are added.
  const dad = hasIpv6Gateway(ipam);
  const routed: BatchOp[] = [...gatewayRoutes, ...podRouteOps(req, podRoutes(ipam)), ...hostSide];
  const plumbed = await plumbPodInterface(req, env, {
    ...definedFields({ node: node || undefined }),
    create: [veth.create],
    createFailed: veth.createFailed,
    ipam,
    before: ipv6EnableSysctls(req.ifname, ipam),
    dadBySysctl: true,
    routes: [],
    ...(dad ? {} : { after: routed }),
  });
  if (!plumbed.ok) return plumbed;
  if (dad) {
    const settled = await settleLikeConfigureIface(req, env, ipam);
    if (!settled.ok) return settled;
    const r = await env.kernel.batch(node, routed);
    if (!r.ok) return err(kernelError(r.error, `network ${req.network.key}: routing ${req.ifname} and ${host}`));
  }
  for (const op of hostSide) if (op.op === 'sysctlWrite') forwardingEnabled.add(op.key);
  const hostInterfaces: CniInterface[] = [{ name: host, mac: veth.mac }];
  const result = podResult({
    hostInterfaces,
    ifname: req.ifname,
    netns: req.netns,
    link: plumbed.value.link,
    ipam,
    routes: ipamRoutes(ipam),
  });
  return ok(conf.dns ? { ...result, dns: conf.dns } : result);
}

/** The pod's routes as ops run in its netns (a route without a gateway got the gateway of its family: podRoutes). */
const podRouteOps = (req: AttachRequest, routes: readonly CniRoute[]): BatchOp[] =>
  routes.map((r) => ({
    op: 'routeAdd',
    route: { dst: r.dst, dev: req.ifname, ...definedFields({ gw: r.gw || undefined }) },
    ignore: ['EEXIST'],
    at: req.netns,
  }));
