/**
 * The second half of every attachment: the pod's interface exists, now give it its addresses and routes
 * and describe it in a CNI result. Shared by the drivers whose pod interface gets IPAM addresses (bridge,
 * macvlan, ipvlan, host-device, tap, vxlan), with the reference plugins' semantics (pkg/ipam ConfigureIface):
 * the interface is brought up, every address is added, and a route without a gateway goes via the gateway
 * of the address of the same family, if there is one.
 */
import { kernelError } from './kernel-error';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { CniInterface, CniIp, CniResult, CniRoute } from '../../cni/types';
import { leaseInterface, type IpamConfig, type IpamResult } from '../../ipam';
import type { KernelCallError } from '../../kernel/kernel';
import type { BatchOp, LinkInfo } from '../../kernel/types';
import type { AttachRequest, DriverEnv } from '../driver';
import { definedFields } from '../../common/defined-fields';

/**
 * Allocates the attachment's addresses, recording their release first. Without IPAM, static IPs cannot be
 * honoured: that is a config error rather than a silently address-less interface.
 */
export async function allocatePodIps(
  req: AttachRequest,
  env: DriverEnv,
  ipam: IpamConfig | undefined,
): Promise<Result<IpamResult | undefined>> {
  if (!ipam) {
    if (req.ips.length)
      return err(
        new CniError(
          CniCode.InvalidNetworkConfig,
          `network ${req.network.key} has no IPAM, so static IPs ${req.ips.join(', ')} cannot be assigned`,
        ),
      );
    if (req.options?.ipamClaim)
      return err(
        new CniError(
          CniCode.InvalidNetworkConfig,
          `network ${req.network.key} has no IPAM, so IPAMClaim ${req.options.ipamClaim} cannot give it addresses`,
        ),
      );
    return ok(undefined);
  }
  // The lease's owner is the whole attachment; the step names it exactly, so its undo releases no other's lease.
  const ifname = leaseInterface(req.runtimeIfname, req.ifname);
  const owner = { network: req.network.cniName, containerId: req.containerId, ifname };
  await env.record({ kind: 'releaseIpam', ...owner });
  const claim = req.options?.ipamClaim ? { claim: req.options.ipamClaim } : {};
  const allocated = await env.ipam.allocate({ ...owner, config: ipam, requestedIps: req.ips, pod: req.pod, ...claim });
  if (!allocated.ok) return err(allocated.error.withContext(`network ${req.network.key}`));
  return ok(allocated.value);
}

const family = (addr: string): 4 | 6 => (addr.includes(':') ? 6 : 4);
const isDefaultRoute = (dst: string): boolean => /^(0\.0\.0\.0|::)\/0$/.test(dst);

/** The first gateway of each family among the allocated addresses. */
export function gatewaysOf(ipam: IpamResult | undefined): Map<4 | 6, string> {
  const gateways = new Map<4 | 6, string>();
  for (const ip of ipam?.ips ?? [])
    if (ip.gateway && !gateways.has(family(ip.address))) gateways.set(family(ip.address), ip.gateway);
  return gateways;
}

/**
 * The routes to add in the pod: IPAM's routes, each given the same-family gateway when it has none, and,
 * with `defaultGateway` (bridge's isDefaultGateway), a default route via each family's gateway.
 */
export function podRoutes(ipam: IpamResult | undefined, opts: { readonly defaultGateway?: boolean } = {}): CniRoute[] {
  const gateways = gatewaysOf(ipam);
  const routes: CniRoute[] = [];
  if (opts.defaultGateway) for (const [fam, gw] of gateways) routes.push({ dst: fam === 4 ? '0.0.0.0/0' : '::/0', gw });
  for (const r of ipam?.routes ?? []) {
    if (opts.defaultGateway && isDefaultRoute(r.dst)) continue; // already added via the gateway
    const gw = r.gw ?? gateways.get(family(r.dst));
    routes.push({ dst: r.dst, ...definedFields({ gw: gw || undefined }) });
  }
  return routes;
}

export interface PodInterfaceSetup {
  /** The interface's name in the pod netns (req.ifname for every driver so far). */
  readonly ifname: string;
  readonly ipam: IpamResult | undefined;
  readonly routes: readonly CniRoute[];
  /** Kernel ops to run in the pod netns before the interface is brought up (e.g. enslaving a tap). */
  readonly before?: readonly BatchOp[];
  /** Add the addresses without the kernel's route to their subnet (ptp routes the subnet via the gateway). */
  readonly noPrefixRoute?: boolean;
  /** Pod-side ops after the addresses, before the routes (e.g. the route that makes the gateway reachable). */
  readonly afterAddresses?: readonly BatchOp[];
  /** Add addresses without the no-DAD flag: the interface's accept_dad sysctl decides (the bridge plugin's way). */
  readonly dadBySysctl?: boolean;
  /** Leave the interface down (the bridge plugin's disableContainerInterface). */
  readonly down?: boolean;
}

/**
 * The ops that bring the pod interface up and add its addresses and routes, ending with a linkGet of it; each
 * runs `at` the pod netns, so they can follow the ops that create the interface in the same batch. Addresses and
 * routes go with the interface when it is deleted or leaves the netns, so they need no undo step of their own.
 */
export function podInterfaceOps(setup: PodInterfaceSetup, at: string): BatchOp[] {
  const ops: BatchOp[] = [...(setup.before ?? [])];
  if (!setup.down) ops.push({ op: 'linkSet', name: setup.ifname, up: true });
  for (const ip of setup.ipam?.ips ?? [])
    ops.push({
      op: 'addrAdd',
      name: setup.ifname,
      address: ip.address,
      ...(setup.dadBySysctl ? {} : { noDad: true }),
      ...(setup.noPrefixRoute ? { noPrefixRoute: true } : {}),
    });
  ops.push(...(setup.afterAddresses ?? []));
  for (const r of setup.routes)
    ops.push({
      op: 'routeAdd',
      route: { dst: r.dst, dev: setup.ifname, ...definedFields({ gw: r.gw || undefined }) },
      ignore: ['EEXIST'],
    });
  ops.push({ op: 'linkGet', name: setup.ifname });
  return ops.map((op) => ({ ...op, at }));
}

/** Configures a pod interface that already exists (one batch in the pod netns) and answers it as the kernel now sees it. */
export async function configurePodInterface(
  req: AttachRequest,
  env: DriverEnv,
  setup: PodInterfaceSetup,
): Promise<Result<LinkInfo>> {
  const r = await env.kernel.batch(req.netns, podInterfaceOps(setup, req.netns));
  if (!r.ok)
    return err(kernelError(r.error, `network ${req.network.key}: configuring ${setup.ifname} in ${req.netns}`));
  return podLinkOf(req, setup.ifname, r.value);
}

function podLinkOf(req: AttachRequest, ifname: string, values: readonly unknown[]): Result<LinkInfo> {
  const link = values[values.length - 1] as LinkInfo | null | undefined;
  if (!link)
    return err(
      new CniError(
        CniCode.Internal,
        `network ${req.network.key}: ${ifname} vanished from ${req.netns} while it was being configured`,
      ),
    );
  return ok(link);
}

export interface Plumbing {
  /** Ops that create (or move in) the pod interface, run in `node` (the daemon's netns when undefined) unless they say `at`. */
  readonly create: readonly BatchOp[];
  readonly node?: string;
  /** Turns a failure of one of the `create` ops into the error to report (add context, map EEXIST...). */
  readonly createFailed: (error: KernelCallError) => CniError;
  readonly ipam: IpamResult | undefined;
  /** Default: podRoutes(ipam). */
  readonly routes?: readonly CniRoute[];
  /** Pod-side ops before the interface is brought up. */
  readonly before?: readonly BatchOp[];
  readonly noPrefixRoute?: boolean;
  readonly afterAddresses?: readonly BatchOp[];
  readonly dadBySysctl?: boolean;
  readonly down?: boolean;
  /** Ops after the pod side is configured, run in `node` unless they say `at` (e.g. host-side addresses and routes). */
  readonly after?: readonly BatchOp[];
}

/**
 * Creates the pod interface and configures it in one trip to the kernel worker: the `create` ops, then the pod
 * side (podInterfaceOps). Answers the results of the `create` ops, the pod link and the routes it added.
 */
export async function plumbPodInterface(
  req: AttachRequest,
  env: DriverEnv,
  p: Plumbing,
): Promise<Result<{ created: unknown[]; link: LinkInfo; routes: readonly CniRoute[] }>> {
  const routes = p.routes ?? podRoutes(p.ipam);
  const podOps = podInterfaceOps(
    {
      ifname: req.ifname,
      ipam: p.ipam,
      routes,
      ...definedFields({ before: p.before }),
      ...(p.noPrefixRoute ? { noPrefixRoute: true } : {}),
      ...definedFields({ afterAddresses: p.afterAddresses }),
      ...(p.dadBySysctl ? { dadBySysctl: true } : {}),
      ...(p.down ? { down: true } : {}),
    },
    req.netns,
  );
  const after = p.after ?? [];
  const r = await env.kernel.batch(p.node, [...p.create, ...podOps, ...after]);
  if (!r.ok) {
    if (r.error.index < p.create.length) return err(p.createFailed(r.error));
    if (r.error.index >= p.create.length + podOps.length)
      return err(kernelError(r.error, `network ${req.network.key}: configuring the host side of ${req.ifname}`));
    return err(kernelError(r.error, `network ${req.network.key}: configuring ${req.ifname} in ${req.netns}`));
  }
  const link = podLinkOf(req, req.ifname, r.value.slice(0, p.create.length + podOps.length));
  if (!link.ok) return link;
  return ok({ created: r.value.slice(0, p.create.length), link: link.value, routes });
}

/** The CNI result: host-side interfaces first (if any), then the pod's, which the IPs point at. */
export function podResult(opts: {
  readonly hostInterfaces?: readonly CniInterface[];
  readonly ifname: string;
  readonly netns: string;
  readonly link: Pick<LinkInfo, 'mac' | 'mtu'>;
  readonly ipam: IpamResult | undefined;
  readonly routes: readonly CniRoute[];
  readonly pciID?: string;
}): CniResult {
  const hostInterfaces = opts.hostInterfaces ?? [];
  const pod: CniInterface = {
    name: opts.ifname,
    ...definedFields({ mac: opts.link.mac || undefined, mtu: opts.link.mtu || undefined }),
    sandbox: opts.netns,
    ...definedFields({ pciID: opts.pciID || undefined }),
  };
  const index = hostInterfaces.length;
  const ips: CniIp[] = (opts.ipam?.ips ?? []).map((ip) => ({
    address: ip.address,
    ...definedFields({ gateway: ip.gateway || undefined }),
    interface: index,
  }));
  return {
    interfaces: [...hostInterfaces, pod],
    ips,
    routes: [...opts.routes],
    ...(opts.ipam?.dns ? { dns: opts.ipam.dns } : {}),
  };
}
