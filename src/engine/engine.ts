/**
 * The attachment engine: ADD, DEL, CHECK, GC, STATUS and changes of a running pod's networks, each a journaled
 * transaction (transaction.ts) in a file of its own under verbs/. Calls for one container are serialized; every change
 * is recorded (as the step that undoes it) before it is made, so a failed ADD, a DEL, GC and crash recovery all undo
 * from the journal alone. This class is the front: it holds the ports, the per-container locks and the little state
 * the verbs share (context.ts), and hands each call to its verb.
 */
import type { Logger } from 'pino';
import type { CniError, Result } from '../cni/errors';
import type { CniRequest } from '../cni/request';
import type { CniResult } from '../cni/types';
import { KeyedMutex } from '../common/keyed-mutex';
import type { UndoStep } from '../drivers/driver';
import type { DriverRegistry } from '../drivers/registry';
import type { Lease } from '../ipam';
import type { NetworkSource } from '../networks/source';
import { AttachmentQuota, attachmentsOf } from './attachment-quota';
import type { ContainerRequest, EngineContext, EngineSeams, EngineWiring, SweepMode, SweepReport } from './context';
import type { AdoptedListOptions, AdoptedSandbox, ForeignSandboxes } from './foreign-sandboxes';
import type { AttachmentTag, AttachmentRecord, Journal } from './journal';
import { NetnsGuard } from './netns-guard';
import { releaseOrphanedLeases } from './orphaned-leases';
import { RecentlyRemoved } from './recently-removed';
import { noStatusSink, type StatusSink } from './status-sink';
import { BackgroundTeardown } from './teardown/background';
import type { TeardownStats } from './teardown/queue';
import { committedSteps } from './committed-steps';
import { add } from './verbs/add';
import { changeNetworks, type NetworksChanged } from './verbs/change';
import { check } from './verbs/check';
import { del, removeAdopted } from './verbs/del';
import { detachAttachment } from './verbs/detach';
import { gc, sweep } from './verbs/gc';
import { status } from './verbs/status';
import { undoUnfinished, type UnfinishedUndone } from './verbs/unfinished';
import { errorMessage } from '../common/error-message';
import { definedFields } from '../common/defined-fields';

export type {
  EnginePorts,
  EngineSeams,
  EngineSettings,
  EngineWiring,
  SweepMode,
  SweepReport,
  SweptAttachment,
} from './context';

const hostNetnsUnknown = (why: string): string =>
  `cannot identify the host's network namespace (${why}): ` +
  "a CNI_NETNS naming it is refused only if it is also plexusd's own";

/** Why a CNI_NETNS is not a pod's: the seam's check, or a NetnsGuard (which logs when it cannot tell the host's). */
function netnsCheck(seams: EngineSeams, log: Logger): (path: string) => CniError | undefined {
  if (seams.podNetnsProblem) return seams.podNetnsProblem;
  const guard = new NetnsGuard();
  if (guard.hostUnknown) log.warn(hostNetnsUnknown(guard.hostUnknown));
  return (path) => guard.problem(path);
}

export class AttachmentEngine {
  private readonly ctx: EngineContext;
  private readonly journal: Journal;
  private readonly networks: NetworkSource;
  private readonly foreign: ForeignSandboxes | undefined;

  constructor({ ports, settings, log, seams = {} }: EngineWiring) {
    const { journal, statusSink = noStatusSink, kernel, ipam, drivers, ...verbPorts } = ports;
    this.journal = journal;
    this.networks = ports.networks;
    this.foreign = ports.foreign;
    const quota = new AttachmentQuota(journal, settings.maxNodeAttachments);
    const recentlyRemoved = new RecentlyRemoved();
    const report = (tell: (sink: StatusSink) => void): void => {
      try {
        tell(statusSink);
      } catch (e) {
        log.warn({ err: errorMessage(e) }, 'the status sink failed; the pod is attached regardless');
      }
    };
    const transactionPorts = {
      journal,
      undo: (step: Parameters<DriverRegistry['undo']>[0]) => drivers.undo(step, { kernel, ipam }),
      removed: (record: AttachmentRecord) => {
        quota.release(attachmentsOf(record));
        recentlyRemoved.add(record.meta.containerId, record.meta.ifname);
      },
    };
    const teardown = settings.teardown
      ? new BackgroundTeardown(
          { journal, undo: transactionPorts.undo, closed: transactionPorts.removed, log },
          settings.teardown,
        )
      : undefined;
    this.ctx = {
      ...verbPorts,
      kernel,
      ipam,
      drivers,
      settings,
      log,
      locks: new KeyedMutex(),
      transactionPorts,
      quota,
      recentlyRemoved,
      podNetnsProblem: netnsCheck(seams, log),
      report,
      ...definedFields({ teardown }),
    };
  }

  /** Every attachment the journal holds, as recorded (for the API). */
  records(): Promise<AttachmentRecord[]> {
    return this.journal.list();
  }

  /** One attachment's record, undefined when the journal has none. */
  recordOf(containerId: string, ifname: string): Promise<AttachmentRecord | undefined> {
    return this.journal.load(containerId, ifname);
  }

  /** The records of one container (every interface the runtime attached for it). */
  recordsOf(containerId: string): Promise<AttachmentRecord[]> {
    return this.journal.listContainer(containerId);
  }

  /** The undo steps of every committed attachment (drivers' resyncs read their own kinds among them). */
  committedSteps(): Promise<UndoStep[]> {
    return committedSteps(this.journal);
  }

  /** The networks the engine can attach, and the definitions it could not use (for the API). */
  listNetworks(): ReturnType<NetworkSource['list']> {
    return this.networks.list();
  }

  /** After a crash: undoes (or finishes) every transaction a crash cut off (verbs/unfinished.ts). */
  undoUnfinished(): Promise<UnfinishedUndone> {
    return undoUnfinished(this.ctx);
  }

  /**
   * For a stopping daemon: finishes the teardowns DELs left to the background, for at most `timeoutMs`. Answers how
   * many are left: their records say deleting, and the next start finishes them.
   */
  drainTeardowns(timeoutMs: number): Promise<number> {
    return this.ctx.teardown?.drain(timeoutMs) ?? Promise.resolve(0);
  }

  /** The background teardown as it is now (for the metrics); undefined when DELs tear down before answering. */
  teardownStats(): TeardownStats | undefined {
    return this.ctx.teardown?.stats();
  }

  /** ADD; `signal` aborted (the runtime gave up) stops it at the next safe point, rolled back as a failed ADD. */
  add(req: ContainerRequest, signal?: AbortSignal): Promise<Result<CniResult>> {
    return add(this.ctx, req, signal);
  }

  del(req: ContainerRequest): Promise<Result<void>> {
    return del(this.ctx, req);
  }

  check(req: ContainerRequest): Promise<Result<void>> {
    return check(this.ctx, req);
  }

  /** Hot-plug: makes a running pod's secondary networks what `annotations` ask for now (verbs/change.ts). */
  changeNetworks(
    containerId: string,
    runtimeIfname: string,
    annotations: Readonly<Record<string, string>>,
  ): Promise<Result<NetworksChanged>> {
    return changeNetworks(this.ctx, containerId, runtimeIfname, annotations);
  }

  /** Removes one network from a running pod (verbs/detach.ts). */
  detachAttachment(containerId: string, runtimeIfname: string, attachment: AttachmentTag): Promise<Result<CniResult>> {
    return detachAttachment(this.ctx, containerId, runtimeIfname, attachment);
  }

  /** Sandboxes another plugin made that this node now tears down (Multus's), for plexusctl and the orphan sweep. */
  adopted(options?: AdoptedListOptions): AdoptedSandbox[] {
    return this.foreign?.list(options) ?? [];
  }

  /** Removes a sandbox another plugin made, as it would, without a DEL from the runtime (its pod is gone). */
  removeAdopted(sandbox: AdoptedSandbox): Promise<Result<void>> {
    return removeAdopted(this.ctx, sandbox);
  }

  gc(req: Extract<CniRequest, { command: 'GC' }>): Promise<Result<void>> {
    return gc(this.ctx, req);
  }

  /** Removes every attachment `stale` gives a reason for, then orphaned leases and drivers' state (verbs/gc.ts). */
  sweep(stale: (record: AttachmentRecord) => string | undefined, mode: SweepMode): Promise<SweepReport> {
    return sweep(this.ctx, stale, mode);
  }

  status(req: Extract<CniRequest, { command: 'STATUS' }>): Promise<Result<void>> {
    return status(this.ctx, req);
  }

  /** Releases the leases no journal record holds, and returns them; with dryRun only returns them. */
  releaseOrphanedLeases({ dryRun }: SweepMode = { dryRun: false }): Promise<Lease[]> {
    return releaseOrphanedLeases({ ...this.ctx, journal: this.journal }, dryRun);
  }
}
