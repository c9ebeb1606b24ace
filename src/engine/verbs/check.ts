/**
 * CHECK: every recorded interface, address and route of the attachment is still there, and drivers with a CHECK of
 * their own (delegated networks ask their plugins) agree, the auxiliary chain aside. A sandbox Multus made is checked as
 * Multus would.
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import type { Driver } from '../../drivers/driver';
import { isAuxiliaryChain } from '../../networks/auxiliary-chain';
import type { ContainerRequest, EngineContext } from '../context';
import { attachmentSteps, type AttachmentRecord } from '../journal';

interface Inspected {
  readonly links: readonly { readonly name: string; readonly index: number; readonly mac?: string }[];
  readonly addrs: readonly { readonly index: number; readonly address: string }[];
  readonly routes: readonly { readonly dst: string; readonly gw?: string }[];
}

const unknownAttachment = (req: ContainerRequest): CniError =>
  new CniError(CniCode.UnknownContainer, `no attachment ${req.ifname} is known for container ${req.containerId}`);

export function check(ctx: EngineContext, req: ContainerRequest): Promise<Result<void>> {
  return ctx.locks.run(req.containerId, async () => {
    const record = await ctx.transactionPorts.journal.load(req.containerId, req.ifname);
    const adopted = record ? undefined : await ctx.foreign?.check(req);
    if (adopted) return adopted;
    if (!record?.result || record.deleting) return err(unknownAttachment(req));
    const verified = await verify(ctx, record.result, req.netns);
    if (!verified.ok) return verified;
    return checkByDrivers(ctx, record);
  });
}

/** Drivers with a CHECK of their own get each attachment they made. */
async function checkByDrivers(ctx: EngineContext, record: AttachmentRecord): Promise<Result<void>> {
  for (const a of record.details?.attachments ?? []) {
    const driver = ctx.drivers.byRecordedType(a.driver);
    // The auxiliary chain has no interface of its own to check; Multus never CHECKs it either.
    if (!driver?.check || isAuxiliaryChain(a.network)) continue;
    const tagged = attachmentSteps(record, a);
    // A v0 record tags no step: its details kept a delegated network's invocations.
    const steps = tagged.length ? tagged : (a.delegated ?? []);
    const attachment = { network: a.network, ifname: a.ifname, result: a.result, steps };
    const r = await driver.check(attachment, { kernel: ctx.kernel }, currentConfig(ctx, driver, a.network));
    if (!r.ok) return err(r.error.withContext(`CHECK of network ${a.network} (${a.ifname})`));
  }
  return ok(undefined);
}

/** The network's config as it is defined now, parsed by `driver`; undefined when it is gone or no longer parses. */
function currentConfig(ctx: EngineContext, driver: Driver, network: string): unknown {
  const [namespace = '', name = ''] = network.split('/');
  const definition = ctx.networks.get(namespace, name);
  if (!definition.ok) return undefined;
  const parsed = driver.parse(definition.value.plugins);
  return parsed.ok ? parsed.value : undefined;
}

/** The links, addresses and routes of a netns (undefined: the host's), or why they cannot be listed. */
async function inspect(ctx: Pick<EngineContext, 'kernel'>, netns: string | undefined): Promise<Inspected | string> {
  const r = await ctx.kernel.batch(netns, [{ op: 'linkList' }, { op: 'addrList' }, { op: 'routeList' }]);
  if (!r.ok) return r.error.message;
  return { links: r.value[0], addrs: r.value[1], routes: r.value[2] };
}

/** What of the result's pod interfaces, addresses and routes `pod` lacks. */
function podProblems(result: CniResult, netns: string, pod: Inspected): string[] {
  const problems: string[] = [];
  for (const [i, iface] of result.interfaces.entries()) {
    if (!iface.sandbox) continue;
    const link = pod.links.find((l) => l.name === iface.name);
    if (!link) {
      problems.push(`interface ${iface.name} is missing in ${netns}`);
      continue;
    }
    if (iface.mac && link.mac !== iface.mac) {
      problems.push(`interface ${iface.name} has MAC ${link.mac}, expected ${iface.mac}`);
    }
    for (const ip of result.ips.filter((x) => x.interface === i)) {
      const held = pod.addrs.some((a) => a.index === link.index && a.address === ip.address);
      if (!held) problems.push(`address ${ip.address} is missing on ${iface.name}`);
    }
  }
  for (const route of result.routes) {
    const found = pod.routes.some((r) => r.dst === route.dst && (route.gw === undefined || r.gw === route.gw));
    if (!found) problems.push(`route ${route.dst}${route.gw ? ` via ${route.gw}` : ''} is missing in ${netns}`);
  }
  return problems;
}

/**
 * CHECK: every recorded interface, address and route is still there. `node`: the netns of the host interfaces, the
 * daemon's own when undefined (the drivers' differential tests stand a netns in).
 */
export async function verify(
  ctx: Pick<EngineContext, 'kernel'>,
  result: CniResult,
  netns: string,
  node?: string,
): Promise<Result<void>> {
  const problems: string[] = [];
  const sandboxes = [...new Set(result.interfaces.flatMap((i) => (i.sandbox ? [i.sandbox] : [])))];
  // A memif interface is a socket, neither a host nor a pod link.
  const hostNames = result.interfaces.filter((i) => !i.sandbox && !i.socketPath).map((i) => i.name);
  if (sandboxes.some((s) => s !== netns)) {
    problems.push(`the attachment was made in ${sandboxes.join(', ')}, CHECK asks about ${netns}`);
  }
  const pod = await inspect(ctx, netns);
  if (typeof pod === 'string') return err(new CniError(CniCode.Internal, `CHECK: cannot inspect ${netns}: ${pod}`));
  problems.push(...podProblems(result, netns, pod));
  if (hostNames.length) {
    const host = await inspect(ctx, node);
    if (typeof host === 'string') return err(new CniError(CniCode.Internal, `CHECK: cannot inspect the host: ${host}`));
    const missing = hostNames.filter((name) => !host.links.some((l) => l.name === name));
    for (const name of missing) problems.push(`host interface ${name} is missing`);
  }
  if (!problems.length) return ok(undefined);
  return err(new CniError(CniCode.Internal, `CHECK failed: ${problems.join('; ')}`, problems.join('\n')));
}
