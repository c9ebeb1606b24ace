/**
 * One planned attachment, run by its driver inside a transaction: each change the driver makes is journaled first,
 * tagged with its network and interface. Shared by ADD and by a change of a running pod's networks.
 */
import { performance } from 'node:perf_hooks';
import { err, ok, type Result } from '../../cni/errors';
import { definedFields } from '../../common/defined-fields';
import type { DriverEnv } from '../../drivers/driver';
import type { EngineContext } from '../context';
import { deviceInfoOf } from '../device-info';
import type { NetworkAttachment } from '../journal';
import type { AttachmentStep } from '../plan';
import type { Transaction } from '../transaction';

/** One step of a transaction: what it attaches, and the signal of the call it serves (if it can be given up on). */
export interface StepRun {
  readonly tx: Transaction;
  readonly step: AttachmentStep;
  readonly signal?: AbortSignal | undefined;
}

export async function attachStep(
  ctx: EngineContext,
  { tx, step, signal }: StepRun,
): Promise<Result<NetworkAttachment>> {
  const label = `${step.planned.network.key} as ${step.planned.ifname}`;
  const owner = { network: step.planned.network.key, ifname: step.planned.ifname };
  const { hostLinkGroup, cniBinDir } = ctx.settings;
  const env: DriverEnv = {
    kernel: ctx.kernel,
    ipam: ctx.ipam,
    cniBinDir,
    record: (undo) => tx.record(undo, owner),
    ...definedFields({ hostLinkGroup, signal }),
  };
  const started = performance.now();
  const attached = await step.driver.attach(step.request, step.config, env);
  if (!attached.ok) {
    await tx.event(`attach ${label} failed: ${attached.error.message}`, performance.now() - started);
    return err(attached.error.withContext(`attaching network ${label}`));
  }
  await tx.event(`attach ${label} (${step.driver.type})`, performance.now() - started);
  const deviceInfo = deviceInfoOf(step, ctx.settings.deviceInfoDir, ctx.log);
  const kubeletDevice = step.request.options?.kubeletDevice;
  return ok({
    network: owner.network,
    ifname: owner.ifname,
    driver: step.driver.type,
    isDefault: step.planned.isDefault,
    result: attached.value,
    ...definedFields({ deviceInfo, kubeletDevice }),
  });
}
