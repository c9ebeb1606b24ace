/**
 * The node's own state, opened first at start: the state directory's lock (a daemon being replaced finishes its calls
 * before this one recovers the journal, which would otherwise undo them), the node-wide CNI call slots, the kernel
 * layer, the host-local lease store and the journal.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { CallSlots } from '../common/call-slots';
import { Journal } from '../engine/journal';
import { Ipam } from '../ipam';
import { Kernel } from '../kernel/kernel';
import { libuvPoolThreads, PodLinkDeletions } from '../kernel/pod-link-deletions';
import type { DaemonConfig } from './config';
import { acquireInstanceLock } from './instance-lock';

export interface NodeState {
  readonly lock: { release(): void };
  readonly kernel: Kernel;
  readonly hostLocal: Ipam;
  readonly journal: Journal;
  /** The bound on CNI calls handled at once (--max-concurrent, --max-queued). */
  readonly slots: CallSlots;
}

/** A CNI call that follows another by more than this is not part of a burst. */
const ALONE_AFTER_MS = 20;

export async function openNodeState(config: DaemonConfig, log: Logger): Promise<NodeState> {
  await mkdir(config.stateDir, { recursive: true, mode: 0o700 });
  const waiting = (holder: string): void =>
    log.info({ holder }, 'waiting for the previous plexusd to finish its calls');
  const lock = await acquireInstanceLock(config.stateDir, waiting);
  // Pod link deletions wait for RCU on the libuv pool, at most as many at once as it can spare (pod-link-deletions.ts).
  const deletions = new PodLinkDeletions(libuvPoolThreads());
  // CNI calls at once, node-wide (handed to the drivers and the server). A call alone on the node (none other in flight
  // or started in the 20 ms before it) runs its kernel batches on this thread (kernel.ts, KernelOptions).
  const slots = new CallSlots(config.maxConcurrent, config.maxQueued);
  const alone = (): boolean => slots.alone(ALONE_AFTER_MS);
  const kernel = new Kernel(config.kernelThreads, deletions, { inlineWhen: alone });
  const hostLocal = await Ipam.open(join(config.stateDir, 'ipam'), {
    sync: config.stateSync,
    onSkipped: (file, reason) => log.warn({ file, reason }, 'lease store: skipped an entry that is not a lease file'),
    hostLocalDataDir: config.hostLocalDataDir,
    onDuplicate: (file, holder) =>
      log.error({ file, holder }, "a lease of this node is held by another in host-local's store: two pods have it"),
  });
  const journal = await Journal.open(join(config.stateDir, 'journal'), config.stateSync);
  return { lock, kernel, hostLocal, journal, slots };
}
