/**
 * Attachments whose pod is gone for good, removed without a DEL: the runtime never sent one (a node rebooted while
 * plexusd was down, a runtime that lost its state, containerd 1.x, which has no CNI GC). An attachment goes only when
 * both are true, so nothing a running sandbox uses is ever released:
 *   - its network namespace no longer exists (the sandbox is gone; the runtime removes it only after its teardown), and
 *   - the API has no pod of that name on this node with that UID (a StatefulSet pod made again under its name has
 *     another UID, and is a different pod).
 * Removal is the engine's own undo (links, leases, delegated plugins' DEL), under the container's lock, with the
 * reason asked again there, so an ADD or DEL that raced in wins.
 */
import { existsSync } from 'node:fs';
import type { Logger } from 'pino';
import type { AdoptedSandbox } from '../engine/foreign-sandboxes';
import type { AttachmentRecord } from '../engine/journal';
import type { Result } from '../cni/errors';
import { errorMessage } from '../common/error-message';

export interface OrphanSweepTarget {
  records(): Promise<AttachmentRecord[]>;
  /** Sandboxes Multus made before Plexus took the node over, and their removal as Multus would remove them. */
  adopted(): AdoptedSandbox[];
  removeAdopted(sandbox: AdoptedSandbox): Promise<Result<void>>;
  sweep(
    stale: (record: AttachmentRecord) => string | undefined,
    mode: { readonly dryRun: boolean },
  ): Promise<{ readonly removed: readonly unknown[]; readonly failures: readonly { readonly error: string }[] }>;
}

export interface PodsByName {
  /** `sandboxUid`: the UID the pod's sandboxes carry (a static pod's, for a mirror pod; pod-source.ts). */
  cachedPod(namespace: string, name: string): { readonly uid: string; readonly sandboxUid: string } | undefined;
}

/** Why an attachment is an orphan, or undefined to keep it. */
export function orphanReason(
  record: AttachmentRecord,
  pods: PodsByName,
  netnsExists: (path: string) => boolean = existsSync,
): string | undefined {
  // Uncommitted or being deleted: recovery and DEL own those.
  if (!record.result || record.deleting || record.changing) return undefined;
  const { namespace, name, uid } = record.meta.pod;
  if (!namespace || !name) return undefined; // not a Kubernetes pod: only the runtime or an operator may remove it
  if (record.meta.netns && netnsExists(record.meta.netns)) return undefined;
  const pod = pods.cachedPod(namespace, name);
  if (pod && (!uid || pod.sandboxUid === uid)) return undefined;
  return pod
    ? `its network namespace is gone and pod ${namespace}/${name} is now another pod (UID ${pod.uid}, not ${uid})`
    : `its network namespace is gone and pod ${namespace}/${name} is no longer on this node`;
}

/** Why a sandbox Multus made is an orphan (the same two proofs), or undefined to keep it. */
export function adoptedOrphanReason(
  sandbox: AdoptedSandbox,
  pods: PodsByName,
  netnsExists: (path: string) => boolean = existsSync,
): string | undefined {
  if (!sandbox.pod || !sandbox.netns || netnsExists(sandbox.netns)) return undefined;
  const { namespace, name, uid } = sandbox.pod;
  const pod = pods.cachedPod(namespace, name);
  if (pod && (!uid || pod.sandboxUid === uid)) return undefined;
  return `its network namespace is gone and pod ${namespace}/${name}${uid ? ` (UID ${uid})` : ''} is no longer on this node`;
}

/** Removes the sandboxes Multus made whose pods are gone; answers what went and what failed. */
async function sweepAdopted(engine: OrphanSweepTarget, pods: PodsByName, log: Logger): Promise<void> {
  for (const sandbox of engine.adopted()) {
    const reason = adoptedOrphanReason(sandbox, pods);
    if (!reason) continue;
    const r = await engine.removeAdopted(sandbox);
    if (r.ok)
      log.warn(
        { containerId: sandbox.containerId, reason },
        'removed a sandbox Multus made whose pod is gone without a DEL',
      );
    else
      log.warn(
        { containerId: sandbox.containerId, err: r.error.message },
        'a sandbox Multus made whose pod is gone could not be removed; next sweep retries',
      );
  }
}

/** Sweeps orphans every `intervalMs` (the pod cache must have synced); answers a function that stops it. */
export function sweepOrphans(engine: OrphanSweepTarget, pods: PodsByName, intervalMs: number, log: Logger): () => void {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    const stale = (r: AttachmentRecord): string | undefined => orphanReason(r, pods);
    engine
      .records()
      // A sweep also runs the drivers' own GC: only worth it when something is to go.
      .then((records) =>
        records.some((r) => stale(r)) ? engine.sweep(stale, { dryRun: false }) : { removed: [], failures: [] },
      )
      .then((report) => {
        if (report.removed.length)
          log.warn({ removed: report.removed }, 'removed attachments of pods that are gone without a DEL');
        if (report.failures.length)
          log.warn(
            { failures: report.failures.map((f) => f.error) },
            'attachments of gone pods could not all be removed; next sweep retries',
          );
      })
      .then(() => sweepAdopted(engine, pods, log))
      .catch((e: unknown) => log.error({ err: errorMessage(e) }, 'orphan sweep failed'))
      .finally(() => {
        running = false;
      });
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
