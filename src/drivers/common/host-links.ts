/** Finding links on the node: by name, and the interface of the default route (the reference macvlan/ipvlan default master). */
import { kernelError } from './kernel-error';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { KernelCallError, KernelPort } from '../../kernel/kernel';
import type { LinkInfo, RouteInfo } from '../../kernel/types';

const MAIN_TABLE = 254;

/**
 * The link the node's IPv4 default route leaves by (IPv6 if there is no IPv4 default route), as the reference
 * plugins pick a master when none is configured. `netns` is the node's netns: the daemon's own when undefined.
 */
export async function defaultRouteLink(kernel: KernelPort, netns?: string): Promise<Result<LinkInfo | undefined>> {
  const r = await kernel.batch(netns, [{ op: 'routeList' }, { op: 'linkList' }]);
  if (!r.ok) return err(kernelError(r.error, 'looking up the default route interface'));
  const routes = r.value[0];
  const links = r.value[1];
  const isDefault = (route: RouteInfo): boolean =>
    route.table === MAIN_TABLE && route.oifIndex !== undefined && /\/0$/.test(route.dst);
  const chosen =
    routes.find((route) => isDefault(route) && route.family === 4) ??
    routes.find((route) => isDefault(route) && route.family === 6);
  return ok(chosen ? links.find((l) => l.index === chosen.oifIndex) : undefined);
}

export const masterNotFound = (what: string, master: string): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `${what}: master device ${master} not found on the host`,
    'create it, or fix "master"',
  );

/** Whether a kernel failure is the lookup of `name` failing (e.g. a master or bridge named in an op does not exist). */
export const isMissingLink = (e: KernelCallError, name: string): boolean =>
  e.failure.op === 'lookup' && e.failure.target === name && e.is('ENODEV');

/**
 * The name of the master to use: the configured one (checked by the kernel when the link is created: see
 * isMissingLink), or the default route's link, looked up now; code 7 when there is none.
 */
export async function masterName(
  kernel: KernelPort,
  master: string | undefined,
  what: string,
  netns?: string,
): Promise<Result<string>> {
  if (master) return ok(master);
  const r = await resolveMaster(kernel, undefined, what, netns);
  return r.ok ? ok(r.value.name) : r;
}

/** The master link named in the config, or the default route's link; code 7 when neither exists. */
export async function resolveMaster(
  kernel: KernelPort,
  master: string | undefined,
  what: string,
  netns?: string,
): Promise<Result<LinkInfo>> {
  if (master) {
    const r = await kernel.getLink(netns, master);
    if (!r.ok) return err(kernelError(r.error, `${what}: looking up master ${master}`));
    if (!r.value) return err(masterNotFound(what, master));
    return ok(r.value);
  }
  const d = await defaultRouteLink(kernel, netns);
  if (!d.ok) return d;
  if (!d.value)
    return err(
      new CniError(
        CniCode.InvalidNetworkConfig,
        `${what}: no "master" given and the host has no default route to take it from`,
        'set "master"',
      ),
    );
  return ok(d.value);
}
