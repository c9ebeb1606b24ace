/**
 * The DEL of a sandbox another plugin made (Multus's) whose own record of it cannot be read: as Multus does then, the
 * pod's networks are planned again from its annotation and the networks as they are now, and each network's plugins
 * get a DEL (last network first, each network's last plugin first), continuing past failures. What the networks'
 * plugins no longer know they release as the CNI spec says: a DEL of something absent succeeds.
 */
import { existsSync } from 'node:fs';
import type { Logger } from 'pino';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import type { CniRequest } from '../cni/request';
import type { UndoEnv } from '../drivers/driver';
import type { DriverRegistry } from '../drivers/registry';
import type { NetworkSource } from '../networks/source';
import { planPod, type PlanSettings } from './plan';
import type { PodSource } from './pod-source';

type DelRequest = Extract<CniRequest, { command: 'ADD' | 'CHECK' | 'DEL' }>;

export interface ForeignDelDeps {
  readonly settings: PlanSettings;
  readonly networks: NetworkSource;
  readonly drivers: DriverRegistry;
  readonly pods?: PodSource;
  readonly cniBinDir: string;
  readonly undoEnv: UndoEnv;
  readonly log: Logger;
}

export async function delByCurrentPlan(req: DelRequest, deps: ForeignDelDeps): Promise<Result<void> | undefined> {
  const pod = `${req.args.podNamespace ?? '?'}/${req.args.podName ?? '?'}`;
  let annotations: Readonly<Record<string, string>> | undefined;
  if (deps.pods && req.args.podNamespace && req.args.podName) {
    const found = await deps.pods.get(req.args.podNamespace, req.args.podName, req.args.podUid);
    if (found.ok) annotations = found.value.annotations;
  }
  const planned = planPod({
    settings: deps.settings,
    networks: deps.networks,
    drivers: deps.drivers,
    req,
    annotations,
  });
  if (!planned.ok) {
    deps.log.warn(
      { pod, containerId: req.containerId, err: planned.error.message },
      "the pod's networks cannot be planned again: only the node's primary network gets the DEL",
    );
    return undefined;
  }
  const netns = req.netns !== '' && existsSync(req.netns) ? req.netns : '';
  const args = req.args.raw.map(([k, v]) => `${k}=${v}`).join(';');
  const failures: string[] = [];
  for (const step of [...planned.value].reverse()) {
    const env = { containerId: req.containerId, netns, ifname: step.planned.ifname, args, path: deps.cniBinDir };
    for (const plugin of [...step.planned.network.plugins].reverse()) {
      const del = deps.drivers.delegateDel({ plugin: plugin.type, config: JSON.stringify(plugin), env });
      const r = await deps.drivers.undo(del, deps.undoEnv);
      if (!r.ok) failures.push(`${step.planned.network.key} (${step.planned.ifname}): ${r.error.message}`);
    }
  }
  deps.log.info(
    {
      pod,
      containerId: req.containerId,
      networks: planned.value.map((s) => `${s.planned.network.key}@${s.planned.ifname}`),
      failed: failures.length,
    },
    "a sandbox Multus made is removed from its pod's annotation and the networks as they are now",
  );
  return failures.length
    ? err(new CniError(CniCode.Internal, `DEL of ${req.containerId}, which Multus attached: ${failures.join(' / ')}`))
    : ok(undefined);
}
