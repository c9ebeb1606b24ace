/**
 * "default-route" on a selected network moves the pod's default route(s) there: removed from the other attachments,
 * added via the requested gateways on the chosen interface, in one kernel batch. The results are rewritten to match.
 */
import { err, ok, type Result } from '../cni/errors';
import { kernelError } from '../drivers/driver';
import type { KernelPort } from '../kernel/kernel';
import type { BatchOp } from '../kernel/types';
import type { NetworkAttachment } from './journal';
import type { AttachmentStep } from './plan';
import { definedFields } from '../common/defined-fields';

const isDefaultDst = (dst: string, family: 4 | 6): boolean => (family === 4 ? dst === '0.0.0.0/0' : dst === '::/0');

/** The other attachments without their default routes of `families`, and the kernel ops that delete those routes. */
function dropDefaults(
  attachments: readonly NetworkAttachment[],
  keep: number,
  families: ReadonlySet<4 | 6>,
  ops: BatchOp[],
): NetworkAttachment[] {
  return attachments.map((a, i) => {
    if (i === keep) return a;
    const dropped = a.result.routes.filter((r) => [...families].some((f) => isDefaultDst(r.dst, f)));
    for (const r of dropped) {
      const route = { dst: r.dst, ...definedFields({ gw: r.gw || undefined }), dev: a.ifname };
      ops.push({ op: 'routeDel', route, ignore: ['ESRCH', 'ENOENT'] });
    }
    if (!dropped.length) return a;
    return { ...a, result: { ...a.result, routes: a.result.routes.filter((r) => !dropped.includes(r)) } };
  });
}

export async function applyDefaultRoute(
  kernel: KernelPort,
  netns: string,
  steps: readonly AttachmentStep[],
  attachments: NetworkAttachment[],
): Promise<Result<NetworkAttachment[]>> {
  const index = steps.findIndex((s) => s.planned.defaultRoute && !s.planned.isDefault);
  const chosen = steps[index];
  const gateways = chosen?.planned.selection?.defaultRoute ?? [];
  if (!chosen || gateways.length === 0) return ok(attachments);
  const families = new Set(gateways.map((g): 4 | 6 => (g.includes(':') ? 6 : 4)));
  const ops: BatchOp[] = [];
  const rewritten = dropDefaults(attachments, index, families, ops);
  const added = gateways.map((gw) => ({ dst: gw.includes(':') ? '::/0' : '0.0.0.0/0', gw }));
  for (const r of added) ops.push({ op: 'routeAdd', route: { ...r, dev: chosen.planned.ifname } });
  const r = await kernel.batch(netns, ops);
  if (!r.ok) {
    const where = `moving the default route to ${chosen.planned.ifname} (network ${chosen.planned.network.key})`;
    return err(kernelError(r.error, where));
  }
  const target = rewritten[index]!;
  const routes = [...target.result.routes.filter((x) => !added.some((a) => a.dst === x.dst)), ...added];
  rewritten[index] = { ...target, result: { ...target.result, routes } };
  return ok(rewritten);
}
