/** Executes recorded undo steps. Each one tolerates what is already gone, so DEL and recovery can repeat them safely. */
import { CniError, Result, ok } from '../cni/errors';
import type { Ipam } from '../ipam';
import type { Kernel } from '../kernel/kernel';
import { runDelegateDel } from './delegate/exec';
import type { UndoStep } from './driver';
import { returnLinkToHost } from './host-device/return-link';

export async function runUndo(step: UndoStep, kernel: Kernel, ipam: Ipam): Promise<Result<void, CniError>> {
  switch (step.kind) {
    case 'deleteLink': {
      const r = await kernel.deleteLink(step.netns, step.name);
      // A pod netns that no longer exists took its links with it.
      if (!r.ok && !(step.netns && r.error.failure.op === 'open netns' && r.error.is('ENOENT'))) return r;
      return ok(undefined);
    }
    case 'releaseIpam': {
      const r = await ipam.release(step.network, step.containerId, step.ifname);
      return r.ok ? ok(undefined) : r;
    }
    case 'deleteRoute': {
      const r = await kernel.batch(step.netns, [{ op: 'routeDel', route: step.route, ignore: ['ESRCH', 'ENODEV', 'ENOENT'] }]);
      if (!r.ok && !(step.netns && r.error.failure.op === 'open netns')) return r;
      return ok(undefined);
    }
    case 'returnLink':
      return returnLinkToHost(step, kernel);
    case 'delegateDel':
      return runDelegateDel(step);
  }
}

export const describeUndo = (step: UndoStep): string => {
  switch (step.kind) {
    case 'deleteLink':
      return `delete link ${step.name}${step.netns ? ` in ${step.netns}` : ' on the host'}`;
    case 'releaseIpam':
      return `release IPs of ${step.containerId}/${step.ifname} in network ${step.network}`;
    case 'deleteRoute':
      return `delete route ${step.route.dst}${step.route.gw ? ` via ${step.route.gw}` : ''}`;
    case 'returnLink':
      return `return ${step.name} from ${step.netns} to the host as ${step.hostName}`;
    case 'delegateDel':
      return `DEL via ${step.plugin} for ${step.env.containerId}/${step.env.ifname}`;
  }
};
