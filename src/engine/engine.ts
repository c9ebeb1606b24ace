/**
 * The attachment engine: ADD, DEL, CHECK and GC as journaled transactions. Calls for one container are
 * serialized; every change is recorded (as the step that undoes it) before it is made, so a failed ADD,
 * a DEL, GC and crash recovery all undo from the journal alone.
 */
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { KeyedMutex } from '../common/keyed-mutex';
import type { CniRequest } from '../cni/request';
import { CniCode, CniError, Result, err, ok, toCniError } from '../cni/errors';
import type { CniResult } from '../cni/types';
import { kernelError, type DriverEnv, type UndoStep } from '../drivers/driver';
import type { BatchOp } from '../kernel/types';
import type { DriverRegistry } from '../drivers/registry';
import { describeUndo, undoStages } from '../drivers/undo';
import type { IpamBackend, Lease } from '../ipam';
import type { KernelPort } from '../kernel/kernel';
import type { NetworkSource } from '../networks/source';
import { delegationForced } from '../networks/planner';
import { AttachmentKey, AttachmentRecord, Journal, JournalEntry, NetworkAttachment, stepsOf, unreadableRecordError } from './journal';
import { planChange } from './change-plan';
import { mergeResults, networkStatus } from '../networks/status';
import { assignDevices, AttachmentStep, configuredDefaultNetwork, type DeviceSource, planPod, PlanSettings, podIdentityOf, runningPodRequest } from './plan';
import { chooseDefaultNetwork } from '../networks/default-network';
import type { AdoptedSandbox, ForeignSandboxes } from './foreign-sandboxes';
import { delByCurrentPlan, type ForeignDelDeps } from './foreign-del';
import type { PodSource } from './pod-source';
import { NetnsGuard } from './netns-guard';
import { refuseTakenNames } from './taken-names';
import { noStatusSink, type StatusSink } from './status-sink';
import { loadDeviceInfo } from '../deviceplugin/device-info';

type AttachRequest = Extract<CniRequest, { command: 'ADD' | 'CHECK' | 'DEL' }>;
type GcRequest = Extract<CniRequest, { command: 'GC' }>;

export interface EngineOptions extends PlanSettings {
  readonly hostLinkGroup?: number;
  readonly cniBinDir: string;
  /** Told what each pod's networks became (default: nobody). */
  readonly statusSink?: StatusSink;
  /** Pod interfaces this node may hold at once (--max-node-attachments); unbounded when not set. */
  readonly maxNodeAttachments?: number;
  /** The Kubernetes API's view of pods (their UID and annotations); without it, the runtime's annotations are used. */
  readonly pods?: PodSource;
  /** The devices the kubelet allocated to pods, for networks that name a resource (default: none asked). */
  readonly devices?: DeviceSource;
  /** Where device plugins write NPWG device-info files (--device-info-dir); without it, none is read. */
  readonly deviceInfoDir?: string;
  /** Sandboxes another plugin made before Plexus served the node (Multus's), torn down as it would (default: none). */
  readonly foreign?: ForeignSandboxes;
  /** Why a CNI_NETNS is not a pod's network namespace (default: NetnsGuard; unit tests on a fake kernel swap it). */
  readonly podNetnsProblem?: (path: string) => CniError | undefined;
}

export interface SweptAttachment {
  readonly containerId: string;
  readonly ifname: string;
  readonly reason: string;
}

/** What a GC removed (or, dry, would remove), what it kept, and what it could not remove. */
export interface SweepReport {
  readonly removed: readonly SweptAttachment[];
  readonly kept: number;
  readonly failures: readonly (SweptAttachment & { readonly error: string })[];
  /** Leases no attachment holds: released, or with dryRun, those a GC would release. */
  readonly leases: readonly Lease[];
  readonly leasesReleased: number;
  readonly dryRun: boolean;
}

/** How many pod interfaces a record holds: its committed attachments, or while uncommitted, its planned networks. */
const attachmentsOf = (record: AttachmentRecord): number => record.details?.attachments.length ?? record.meta.networks.length;

/** How many removed attachments the engine remembers, to recognise the runtime's repeated DELs of them. */
const RECENTLY_REMOVED_KEPT = 4096;

function repeatedAddDiffers(req: AttachRequest, record: AttachmentRecord, recorded: readonly string[], asked: readonly string[]): CniError {
  const what = `CNI_CONTAINERID ${req.containerId} with CNI_IFNAME ${req.ifname}`;
  const attached = `attached (runtime network ${record.meta.cniNetwork}): ${recorded.join(', ') || 'none'}`;
  const message = `${what} is attached already, to other networks than this ADD asks for`;
  return new CniError(CniCode.InvalidEnvironment, message, `${attached}; asked: ${asked.join(', ') || 'none'}. DEL it before adding it again`);
}

const unreadableRecord = (record: AttachmentRecord): CniError =>
  unreadableRecordError(record);

const asError = (e: unknown): Result<never> => err(toCniError(e));

const hostNetnsUnknown = (why: string): string =>
  `cannot identify the host's network namespace (${why}): a CNI_NETNS naming it is refused only if it is also plexusd's own`;

export class AttachmentEngine {
  private readonly containerLocks = new KeyedMutex();
  private readonly podNetnsProblem: (path: string) => CniError | undefined;
  /** Pod interfaces the journal holds; counted once, on first use, then kept as ADDs, DELs and detaches happen. */
  private attachmentsHeld: number | undefined;
  /**
   * Attachments this daemon removed lately (container ID and ifname), oldest first: the runtime's repeated DEL of a
   * sandbox Plexus already cleaned (containerd sends a second one) must not be forwarded to the node's own plugins.
   */
  private readonly recentlyRemoved = new Map<string, true>();

  constructor(
    private readonly kernel: KernelPort,
    private readonly ipam: IpamBackend,
    private readonly journal: Journal,
    private readonly networks: NetworkSource,
    private readonly drivers: DriverRegistry,
    private readonly options: EngineOptions,
    private readonly log: Logger,
  ) {
    if (options.podNetnsProblem) this.podNetnsProblem = options.podNetnsProblem;
    else {
      const guard = new NetnsGuard();
      this.podNetnsProblem = (path) => guard.problem(path);
      if (guard.hostUnknown) log.warn(hostNetnsUnknown(guard.hostUnknown));
    }
  }

  /** Every attachment the journal holds, as recorded (for the API). */
  records(): Promise<AttachmentRecord[]> {
    return this.journal.list();
  }

  /** The records of one container (every interface the runtime attached for it). */
  recordsOf(containerId: string): Promise<AttachmentRecord[]> {
    return this.journal.listContainer(containerId);
  }

  /** The userspace-switch ports of every committed attachment (what a switch that lost its ports must get back). */
  async switchPorts(): Promise<Extract<UndoStep, { kind: 'deleteSwitchPort' }>[]> {
    const out: Extract<UndoStep, { kind: 'deleteSwitchPort' }>[] = [];
    for (const record of await this.journal.list()) {
      if (!record.result || record.deleting || record.changing) continue;
      for (const step of record.undo) if (step.kind === 'deleteSwitchPort') out.push(step);
    }
    return out;
  }

  /** The networks the engine can attach, and the definitions it could not use (for the API). */
  listNetworks(): ReturnType<NetworkSource['list']> {
    return this.networks.list();
  }

  /**
   * After a crash: undoes every transaction that was not committed (an ADD cut off) or was being deleted (a DEL cut
   * off). Answers what was undone and what could not be, record by record.
   */
  async undoUnfinished(): Promise<{ readonly undone: readonly AttachmentRecord[]; readonly failed: readonly { readonly record: AttachmentRecord; readonly error: CniError }[] }> {
    const undone: AttachmentRecord[] = [];
    const failed: { record: AttachmentRecord; error: CniError }[] = [];
    for (const record of await this.journal.list()) {
      // A record that cannot be read is never undone, nor is its change finished: it stays for an operator.
      if (record.unreadable) {
        failed.push({ record, error: unreadableRecord(record) });
        continue;
      }
      if (record.result && !record.deleting && record.changing) {
        const r = await this.containerLocks.run(record.meta.containerId, () => this.finishChange(record)).catch(asError);
        if (r.ok) undone.push(record);
        else failed.push({ record, error: r.error });
        continue;
      }
      if (record.result && !record.deleting) continue;
      // A journal that cannot be written (a full disk) fails this record, not the start of the daemon.
      const r = await this.undoRecord(record).catch(asError);
      if (r.ok) undone.push(record);
      else failed.push({ record, error: r.error });
    }
    return { undone, failed };
  }

  async add(req: AttachRequest): Promise<Result<CniResult>> {
    // The pod as the API knows it: its annotations, and proof (its UID) that this sandbox is still that pod's. A pod
    // that cannot be found gets no event: the name may be another pod's now.
    let podAnnotations: Readonly<Record<string, string>> | undefined;
    if (this.options.pods && req.args.podNamespace && req.args.podName) {
      const pod = await this.options.pods.get(req.args.podNamespace, req.args.podName, req.args.podUid);
      if (!pod.ok) return pod;
      podAnnotations = pod.value.annotations;
    }
    const added = await this.containerLocks.run(req.containerId, () => this.addLocked(req, podAnnotations));
    if (!added.ok) this.report((sink) => sink.failed(podIdentityOf(req), req.containerId, added.error));
    return added;
  }

  private async addLocked(req: AttachRequest, podAnnotations: Readonly<Record<string, string>> | undefined): Promise<Result<CniResult>> {
    const existing = await this.journal.load(req.containerId, req.ifname);
    if (existing?.unreadable) return err(unreadableRecord(existing));
    if (existing?.result && !existing.deleting) {
      // A retried ADD (e.g. after a lost reply) gets the same answer; one that asks for something else is an error.
      if (existing.meta.netns !== req.netns) {
        const message = `container ${req.containerId} already has ${req.ifname} attached in ${existing.meta.netns}`;
        return err(new CniError(CniCode.InvalidEnvironment, message, 'DEL it before adding it again'));
      }
      const other = this.otherAttachments(existing, req, podAnnotations);
      return other ? err(other) : ok(existing.result);
    }
    if (existing) {
      const cleaned = await this.undoRecord(existing);
      if (!cleaned.ok) return err(new CniError(CniCode.TryAgainLater, `leftovers of an earlier ADD of ${req.containerId}/${req.ifname} could not be removed`, cleaned.error.message));
    }

    // Plan and validate everything before touching anything: a bad request leaves nothing behind.
    const planned = planPod(req, this.options, this.networks, this.drivers, podAnnotations);
    if (!planned.ok) return planned;
    const withDevices = await assignDevices(planned.value, podIdentityOf(req), this.options.devices);
    if (!withDevices.ok) return withDevices;
    const steps = withDevices.value;
    const netnsProblem = this.podNetnsProblem(req.netns);
    if (netnsProblem) return err(netnsProblem);
    const free = await refuseTakenNames(this.kernel, req.netns, steps.map((s) => s.planned.ifname));
    if (!free.ok) return free;
    const full = await this.reserveAttachments(steps.length);
    if (full) return err(full);

    // From here the record holds the reservation: undoing the record gives it back (undoRecord).
    const entry = await this.journal
      .begin({
        containerId: req.containerId, ifname: req.ifname, netns: req.netns, pod: steps[0]!.request.pod, cniNetwork: req.networkName,
        networks: steps.map((s) => s.planned.network.key), startedAt: new Date().toISOString(),
      })
      .catch((e: unknown) => {
        this.releaseAttachments(steps.length);
        throw e;
      });
    let closed = false;
    const close = async (): Promise<void> => {
      if (!closed) await entry.close();
      closed = true;
    };
    try {
      // Attachments run one after another, in plan order (NPWG); the first failure undoes them all.
      const attachments: NetworkAttachment[] = [];
      for (const step of steps) {
        const attached = await this.attachStep(entry, step);
        if (!attached.ok) {
          await close();
          return err(await this.rollback(req, attached.error));
        }
        attachments.push(attached.value);
      }
      const routed = await this.applyDefaultRoute(req.netns, steps, attachments);
      if (!routed.ok) {
        await close();
        return err(await this.rollback(req, routed.error));
      }
      const final = routed.value;
      const result = mergeResults(final.map((a) => a.result));
      const status = networkStatus(final);
      await entry.commit(result, req.version, { attachments: final, networkStatus: status });
      await close();
      this.report((sink) => sink.attached(steps[0]!.request.pod, req.containerId, status, status));
      return ok(result);
    } catch (e) {
      await close().catch(() => undefined);
      const cause = e instanceof CniError ? e : new CniError(CniCode.Internal, `ADD ${req.containerId}/${req.ifname} failed unexpectedly: ${(e as Error).message}`, (e as Error).stack ?? '');
      return err(await this.rollback(req, cause));
    }
  }

  /**
   * Why a repeated ADD of a committed container and interface is not a retry of the one that made it: it names another
   * runtime network, or its plan (networks and interface names) is another than the record's. The spec allows one ADD
   * per CNI_CONTAINERID and CNI_IFNAME until DEL; only a retry gets the stored answer. A plan that cannot be made now (a
   * network deleted since) cannot be compared: the record's answer stands.
   */
  private otherAttachments(
    record: AttachmentRecord,
    req: AttachRequest,
    podAnnotations: Readonly<Record<string, string>> | undefined,
  ): CniError | undefined {
    const recorded = record.details?.attachments.map((a) => `${a.network} as ${a.ifname}`) ?? record.meta.networks;
    let asked: string[] | undefined;
    if (req.networkName !== record.meta.cniNetwork) asked = [`runtime network ${req.networkName}`];
    else {
      const planned = planPod(req, this.options, this.networks, this.drivers, podAnnotations);
      if (!planned.ok) return undefined;
      const steps = planned.value.map((s) => `${s.planned.network.key} as ${s.planned.ifname}`);
      const mapped = record.details ? steps : planned.value.map((s) => s.planned.network.key);
      if (mapped.length !== recorded.length || mapped.some((x) => !recorded.includes(x))) asked = steps;
    }
    return asked ? repeatedAddDiffers(req, record, recorded, asked) : undefined;
  }

  /** Runs one planned attachment, each of its changes journaled (for its network and interface) before it is made. */
  private async attachStep(entry: JournalEntry, step: AttachmentStep): Promise<Result<NetworkAttachment>> {
    const label = `${step.planned.network.key} as ${step.planned.ifname}`;
    const delegated: Extract<UndoStep, { kind: 'delegateDel' }>[] = [];
    const owner = { network: step.planned.network.key, ifname: step.planned.ifname };
    const env: DriverEnv = {
      kernel: this.kernel, ipam: this.ipam, cniBinDir: this.options.cniBinDir,
      record: (undo) => {
        if (undo.kind === 'delegateDel') delegated.push(undo);
        return entry.record(undo, owner);
      },
      ...(this.options.hostLinkGroup !== undefined ? { hostLinkGroup: this.options.hostLinkGroup } : {}),
    };
    const started = performance.now();
    const attached = await step.driver.attach(step.request, step.config, env);
    if (!attached.ok) {
      await entry.event(`attach ${label} failed: ${attached.error.message}`, performance.now() - started);
      return err(attached.error.withContext(`attaching network ${label}`));
    }
    await entry.event(`attach ${label} (${step.driver.type})`, performance.now() - started);
    const deviceInfo = this.deviceInfoOf(step);
    const kubeletDevice = step.request.options?.kubeletDevice;
    return ok({
      network: owner.network, ifname: owner.ifname, driver: step.driver.type, isDefault: step.planned.isDefault, result: attached.value,
      ...(delegated.length ? { delegated } : {}),
      ...(deviceInfo ? { deviceInfo } : {}),
      ...(kubeletDevice ? { kubeletDevice } : {}),
    });
  }

  /**
   * The device-info file a device plugin (any, as Multus reads them) wrote for the step's kubelet device. A bad file
   * is the plugin's problem, not the pod's: it is left out of network-status, with a debug line saying why.
   */
  private deviceInfoOf(step: AttachmentStep): Record<string, unknown> | undefined {
    const device = step.request.options?.kubeletDevice;
    if (!device || !this.options.deviceInfoDir) return undefined;
    const read = loadDeviceInfo(this.options.deviceInfoDir, device.resourceName, device.deviceID);
    if (read.kind === 'malformed') this.log.debug({ network: step.planned.network.key, path: read.path, reason: read.reason }, 'device-info file ignored');
    return read.kind === 'found' ? read.info : undefined;
  }

  /**
   * Hot-plug: makes a running pod's secondary networks what `annotations` (the pod's, from the API) ask for now, as
   * one journaled transaction. Networks are added first; if one fails, those added are undone and the pod is as it
   * was. Then the networks no longer asked for are removed. Untouched attachments keep their interfaces. Answers what
   * changed (nothing, when the pod already has what it asks for).
   */
  changeNetworks(containerId: string, runtimeIfname: string, annotations: Readonly<Record<string, string>>): Promise<Result<{ readonly added: readonly AttachmentKey[]; readonly removed: readonly AttachmentKey[] }>> {
    return this.containerLocks.run(containerId, async () => {
      const record = await this.journal.load(containerId, runtimeIfname);
      if (!record?.result || record.deleting) return err(new CniError(CniCode.UnknownContainer, `no attachment ${runtimeIfname} is known for container ${containerId}`));
      if (record.unreadable) return err(unreadableRecord(record));
      if (record.undoOwners.some((o) => o === undefined)) {
        return err(new CniError(CniCode.InvalidNetworkConfig, `the pod's networks cannot change while it runs: it was attached by an older plexusd (journal v0), whose steps name no network`));
      }
      const req = runningPodRequest(record);
      const planned = planPod(req, this.options, this.networks, this.drivers, annotations, true);
      if (!planned.ok) return planned;
      const attachments = record.details?.attachments ?? [];
      const change = planChange(attachments, planned.value, (s) => s.planned);
      if (!change.ok) return change;
      const remove = change.value.remove.map((a) => ({ network: a.network, ifname: a.ifname }));
      if (change.value.add.length === 0 && remove.length === 0) return ok({ added: [], removed: [] });
      // Networks added to the running pod take devices the kubelet allocated it that no attachment uses yet (one that
      // this change removes is still in use until the additions are done).
      const taken = attachments.flatMap((a) => (a.kubeletDevice ? [a.kubeletDevice] : []));
      const devised = await assignDevices(change.value.add.map((a) => a.step), record.meta.pod, this.options.devices, taken);
      if (!devised.ok) return devised;
      const add = change.value.add.map((a, i) => ({ ...a, step: devised.value[i]! }));
      const netnsProblem = this.podNetnsProblem(record.meta.netns);
      if (netnsProblem) return err(netnsProblem);
      const free = await refuseTakenNames(this.kernel, record.meta.netns, add.map((a) => a.ifname));
      if (!free.ok) return free;
      const full = await this.reserveAttachments(add.length);
      if (full) return err(full);

      const addKeys = add.map((a) => ({ network: a.step.planned.network.key, ifname: a.ifname }));
      const entry = await this.journal.reopen(containerId, runtimeIfname);
      try {
        await entry.change({ add: addKeys, remove });
        const added: NetworkAttachment[] = [];
        for (const { step, ifname } of add) {
          const renamed: AttachmentStep = { ...step, planned: { ...step.planned, ifname }, request: { ...step.request, ifname } };
          const attached = await this.attachStep(entry, renamed);
          if (attached.ok) {
            added.push(attached.value);
            continue;
          }
          // Leave the pod as it was: undo what this change added, and commit the pod's networks as they were.
          const undone = await this.undoChange(entry, containerId, runtimeIfname, addKeys, []);
          await entry.commit(record.result, record.cniVersion ?? '1.1.0', record.details);
          this.releaseAttachments(add.length);
          const left = undone.ok ? '' : `; undoing the networks added so far failed (GC retries): ${undone.error}`;
          return err(new CniError(attached.error.code, `${attached.error.message}${left}`, attached.error.details));
        }
        await entry.added(added);
        const removed = await this.undoChange(entry, containerId, runtimeIfname, [], remove);
        const gone = remove.filter((r) => !removed.failed.some((f) => f.network === r.network && f.ifname === r.ifname));
        const final = [...attachments.filter((a) => !gone.some((g) => g.network === a.network && g.ifname === a.ifname)), ...added];
        const status = networkStatus(final);
        await entry.commit(mergeResults(final.map((a) => a.result)), record.cniVersion ?? '1.1.0', { attachments: final, networkStatus: status });
        this.releaseAttachments(gone.length);
        const addedStatus = status.filter((st) => added.some((a) => a.ifname === st.interface));
        this.report((sink) => sink.attached(record.meta.pod, containerId, status, addedStatus, gone));
        if (!removed.ok) return err(new CniError(CniCode.Internal, `the new networks were added, but removing ${removed.failed.map((f) => `${f.network} as ${f.ifname}`).join(', ')} failed: ${removed.error}`, 'they stay recorded; the pod\'s DEL or the next change removes them'));
        return ok({ added: addKeys, removed: gone });
      } finally {
        await entry.close();
      }
    });
  }

  /** Undoes the steps of `added` and `removed` attachments of a pod, each then retired from its record. */
  private async undoChange(entry: JournalEntry, containerId: string, runtimeIfname: string, added: readonly AttachmentKey[], removed: readonly AttachmentKey[]): Promise<{ ok: boolean; error: string; failed: AttachmentKey[] }> {
    const record = await this.journal.load(containerId, runtimeIfname);
    const failed: AttachmentKey[] = [];
    const errors: string[] = [];
    for (const key of [...added, ...removed]) {
      const steps = record ? stepsOf(record, key) : [];
      const r = await this.runUndoSteps(steps, `network ${key.network} as ${key.ifname} of ${containerId}/${runtimeIfname}`);
      if (r.ok) await entry.detached(key);
      else {
        failed.push(key);
        errors.push(r.error.message);
      }
    }
    return { ok: failed.length === 0, error: errors.join('; '), failed };
  }

  /**
   * After a crash in the middle of a change of a running pod's networks: a change cut off while adding is undone (the
   * pod is as it was); one cut off while removing, its additions complete, is finished. Either way the pod's networks
   * are committed as they then are, and the hot-plug controller compares the pod with its annotation again.
   */
  private async finishChange(record: AttachmentRecord): Promise<Result<void>> {
    const { containerId, ifname } = record.meta;
    const change = record.changing!;
    const entry = await this.journal.reopen(containerId, ifname);
    try {
      const finishing = change.added !== undefined;
      const undone = await this.undoChange(entry, containerId, ifname, finishing ? [] : change.add, finishing ? change.remove : []);
      const gone = (finishing ? change.remove : []).filter((k) => !undone.failed.some((f) => f.network === k.network && f.ifname === k.ifname));
      const before = record.details?.attachments ?? [];
      const final = [...before.filter((a) => !gone.some((g) => g.network === a.network && g.ifname === a.ifname)), ...(change.added ?? [])];
      await entry.commit(mergeResults(final.map((a) => a.result)), record.cniVersion ?? '1.1.0', { attachments: final, networkStatus: networkStatus(final) });
      return undone.ok ? ok(undefined) : err(new CniError(CniCode.Internal, `${finishing ? 'finishing' : 'undoing'} an interrupted change of ${containerId}/${ifname}: ${undone.error}`));
    } finally {
      await entry.close();
    }
  }

  /**
   * "default-route" on a selected network moves the pod's default route(s) there: removed from the other
   * attachments, added via the requested gateways on the chosen interface. The results are rewritten to match.
   */
  private async applyDefaultRoute(netns: string, steps: readonly AttachmentStep[], attachments: NetworkAttachment[]): Promise<Result<NetworkAttachment[]>> {
    const index = steps.findIndex((s) => s.planned.defaultRoute && !s.planned.isDefault);
    const chosen = steps[index];
    const gateways = chosen?.planned.selection?.defaultRoute ?? [];
    if (!chosen || gateways.length === 0) return ok(attachments);
    const families = new Set(gateways.map((g) => (g.includes(':') ? 6 : 4)));
    const isDefaultDst = (dst: string, fam: 4 | 6): boolean => (fam === 4 ? dst === '0.0.0.0/0' : dst === '::/0');
    const ops: BatchOp[] = [];
    const rewritten = attachments.map((a, i) => {
      if (i === index) return a;
      const dropped = a.result.routes.filter((r) => [...families].some((f) => isDefaultDst(r.dst, f)));
      for (const r of dropped) ops.push({ op: 'routeDel', route: { dst: r.dst, ...(r.gw ? { gw: r.gw } : {}), dev: a.ifname }, ignore: ['ESRCH', 'ENOENT'] });
      return dropped.length ? { ...a, result: { ...a.result, routes: a.result.routes.filter((r) => !dropped.includes(r)) } } : a;
    });
    const added = gateways.map((gw) => ({ dst: gw.includes(':') ? '::/0' : '0.0.0.0/0', gw }));
    for (const r of added) ops.push({ op: 'routeAdd', route: { ...r, dev: chosen.planned.ifname } });
    const r = await this.kernel.batch(netns, ops);
    if (!r.ok) return err(kernelError(r.error, `moving the default route to ${chosen.planned.ifname} (network ${chosen.planned.network.key})`));
    const target = rewritten[index]!;
    rewritten[index] = { ...target, result: { ...target.result, routes: [...target.result.routes.filter((x) => !added.some((a) => a.dst === x.dst)), ...added] } };
    return ok(rewritten);
  }

  /** Undoes a failed ADD; the error says what failed and, if anything could not be undone, what remains. */
  private async rollback(req: AttachRequest, cause: CniError): Promise<CniError> {
    const record = await this.journal.load(req.containerId, req.ifname);
    if (!record) return cause;
    const undone = await this.undoRecord(record);
    if (undone.ok) return cause;
    this.log.error({ containerId: req.containerId, ifname: req.ifname, err: undone.error.message }, 'rollback incomplete; recovery will retry');
    return new CniError(cause.code, cause.message, `${cause.details}${cause.details ? '; ' : ''}rollback incomplete (will be retried): ${undone.error.message}`);
  }

  /** Undoes every recorded step (in the stages of undoStages), continuing past failures; removes the record when all succeeded. */
  private async undoRecord(record: AttachmentRecord): Promise<Result<void>> {
    const { containerId, ifname } = record.meta;
    if (record.unreadable) return err(unreadableRecord(record));
    if (!record.deleting) {
      const entry = await this.journal.reopen(containerId, ifname);
      try {
        await entry.markDeleting();
      } finally {
        await entry.close();
      }
    }
    const undone = await this.runUndoSteps(record.undo, `${containerId}/${ifname}`);
    if (!undone.ok) return undone;
    await this.journal.remove(containerId, ifname);
    this.releaseAttachments(attachmentsOf(record));
    this.recentlyRemoved.set(`${containerId}\u0000${ifname}`, true);
    if (this.recentlyRemoved.size > RECENTLY_REMOVED_KEPT) this.recentlyRemoved.delete(this.recentlyRemoved.keys().next().value!);
    return ok(undefined);
  }

  /** Reserves room for `n` more pod interfaces on this node, or says the node is full. */
  private async reserveAttachments(n: number): Promise<CniError | undefined> {
    const max = this.options.maxNodeAttachments;
    if (max === undefined) return undefined;
    if (this.attachmentsHeld === undefined) {
      const records = await this.journal.list();
      this.attachmentsHeld ??= records.reduce((sum, r) => sum + attachmentsOf(r), 0);
    }
    if (this.attachmentsHeld + n > max) {
      return new CniError(CniCode.TryAgainLater, `this node holds ${this.attachmentsHeld} pod interfaces; ${n} more would pass its limit (--max-node-attachments ${max})`, 'try again when pods have been deleted, or ask the node\'s operator to raise the limit');
    }
    this.attachmentsHeld += n;
    return undefined;
  }

  private releaseAttachments(n: number): void {
    if (this.attachmentsHeld !== undefined) this.attachmentsHeld = Math.max(0, this.attachmentsHeld - n);
  }

  /** Runs undo steps in the stages of undoStages, continuing past failures, which are reported together. */
  private async runUndoSteps(steps: readonly UndoStep[], what: string): Promise<Result<void>> {
    const failures: string[] = [];
    for (const stage of undoStages(steps)) {
      const results = await Promise.all(stage.map((step) => this.drivers.undo(step, { kernel: this.kernel, ipam: this.ipam })));
      results.forEach((r, k) => {
        if (!r.ok) failures.push(`${describeUndo(stage[k]!)}: ${r.error.message}`);
      });
    }
    return failures.length ? err(new CniError(CniCode.Internal, `could not undo ${failures.length} step(s) of ${what}: ${failures.join('; ')}`)) : ok(undefined);
  }

  /**
   * Removes one network from a running pod: undoes the steps recorded for that attachment only, then records that it
   * is gone and commits the pod's result without it. The pod's other networks are untouched. The default network stays.
   */
  detachAttachment(containerId: string, runtimeIfname: string, attachment: AttachmentKey): Promise<Result<CniResult>> {
    return this.containerLocks.run(containerId, async () => {
      const record = await this.journal.load(containerId, runtimeIfname);
      const label = `network ${attachment.network} as ${attachment.ifname} of ${containerId}/${runtimeIfname}`;
      if (!record?.result || record.deleting) return err(new CniError(CniCode.UnknownContainer, `no attachment ${runtimeIfname} is known for container ${containerId}`));
      if (record.unreadable) return err(unreadableRecord(record));
      const attachments = record.details?.attachments ?? [];
      const target = attachments.find((a) => a.network === attachment.network && a.ifname === attachment.ifname);
      if (!target) return err(new CniError(CniCode.InvalidNetworkConfig, `${label}: the pod has no such attachment`, `attached: ${attachments.map((a) => `${a.network} as ${a.ifname}`).join(', ')}`));
      if (target.isDefault) return err(new CniError(CniCode.InvalidNetworkConfig, `${label}: the default network cannot be detached from a running pod`));
      if (record.undoOwners.some((o) => o === undefined)) {
        return err(new CniError(CniCode.InvalidNetworkConfig, `${label}: the pod was attached by an older plexusd (journal v0), whose steps name no network; its networks can only be removed together, by DEL`));
      }
      const undone = await this.runUndoSteps(stepsOf(record, attachment), label);
      if (!undone.ok) return undone;
      const remaining = attachments.filter((a) => a !== target);
      const result = mergeResults(remaining.map((a) => a.result));
      const status = networkStatus(remaining);
      const entry = await this.journal.reopen(containerId, runtimeIfname);
      try {
        await entry.detached(attachment);
        await entry.commit(result, record.cniVersion ?? '1.1.0', { attachments: remaining, networkStatus: status });
      } finally {
        await entry.close();
      }
      this.releaseAttachments(1);
      this.report((sink) => sink.attached(record.meta.pod, containerId, status, []));
      return ok(result);
    });
  }

  del(req: AttachRequest): Promise<Result<void>> {
    return this.containerLocks.run(req.containerId, async () => {
      const record = await this.journal.load(req.containerId, req.ifname);
      if (!record) {
        if (req.args.podNamespace && req.args.podName) {
          const current = (await this.journal.list()).find((r) => r.meta.pod.namespace === req.args.podNamespace && r.meta.pod.name === req.args.podName && r.meta.ifname === req.ifname);
          if (current) this.log.info({ staleContainerId: req.containerId, currentContainerId: current.meta.containerId, pod: `${req.args.podNamespace}/${req.args.podName}` }, 'stale DEL ignored: the pod is attached under another container ID');
        }
        // A sandbox Multus made before Plexus served the node is removed as Multus would have removed it.
        const adopted = await this.options.foreign?.del(req);
        if (adopted?.kind === 'done') return adopted.result;
        if (adopted?.kind === 'unreadable') {
          const replanned = await delByCurrentPlan(req, this.foreignDelDeps());
          this.options.foreign?.forget(adopted.what);
          if (replanned) return replanned;
        }
        // DEL of what does not exist succeeds (CNI spec); a sandbox the node's own network made (before Plexus was
        // installed) is handed to that network's plugins, so its address is released where it was taken.
        return this.forwardUnknownDel(req);
      }
      const undone = await this.undoRecord(record);
      if (undone.ok) this.report((sink) => sink.detached(record.meta.pod, req.containerId));
      return undone;
    });
  }

  private foreignDelDeps(): ForeignDelDeps {
    const { options, networks, drivers, kernel, ipam, log } = this;
    return { settings: options, networks, drivers, ...(options.pods ? { pods: options.pods } : {}), cniBinDir: options.cniBinDir, undoEnv: { kernel, ipam }, log };
  }

  /**
   * A DEL of a sandbox Plexus has no record of, when the default network is the node's own CNI config file: that
   * network's plugins get the DEL (last plugin first), as the runtime would have sent it before Plexus was installed.
   * Their DEL of something they do not have succeeds (CNI spec), so a sandbox that was never theirs costs one exec.
   */
  private async forwardUnknownDel(req: AttachRequest): Promise<Result<void>> {
    const configured = configuredDefaultNetwork(req, this.options);
    if (!configured?.startsWith('/')) return ok(undefined);
    // Plexus had it and removed it (its undo already ran the node's plugins' DEL): this is the runtime repeating itself.
    if (this.recentlyRemoved.has(`${req.containerId}\u0000${req.ifname}`)) return ok(undefined);
    const network = chooseDefaultNetwork({ configured, annotations: {}, podNamespace: req.args.podNamespace ?? 'default', networks: this.networks, isolation: {} });
    if (!network.ok) {
      this.log.warn({ containerId: req.containerId, err: network.error.message }, 'DEL of an unknown sandbox not forwarded: the node\'s network config cannot be read');
      return ok(undefined);
    }
    const env = { containerId: req.containerId, netns: req.netns, ifname: req.ifname, args: req.args.raw.map(([k, v]) => `${k}=${v}`).join(';'), path: this.options.cniBinDir };
    for (const plugin of [...network.value.plugins].reverse()) {
      const r = await this.drivers.undo({ kind: 'delegateDel', plugin: plugin.type, config: JSON.stringify(plugin), env }, { kernel: this.kernel, ipam: this.ipam });
      if (!r.ok) return err(r.error.withContext(`DEL of ${req.containerId}/${req.ifname}, which Plexus did not attach, forwarded to the node's network ${network.value.key} (${configured})`));
    }
    return ok(undefined);
  }

  /** Sandboxes another plugin made that this node now tears down (Multus's), for plexusctl and the orphan sweep. */
  adopted(): AdoptedSandbox[] {
    return this.options.foreign?.list() ?? [];
  }

  /** Removes a sandbox another plugin made, as it would, without a DEL from the runtime (its pod is gone). */
  async removeAdopted(sandbox: AdoptedSandbox): Promise<Result<void>> {
    const ifname = sandbox.networks[0]?.ifname ?? '';
    const foreign = this.options.foreign;
    if (!foreign) return ok(undefined);
    const outcome = await this.containerLocks.run(sandbox.containerId, () =>
      foreign.del({ containerId: sandbox.containerId, netns: '', ifname, args: { ips: [], ignoreUnknown: true, raw: [] } }));
    return outcome.kind === 'done' ? outcome.result : ok(undefined);
  }

  /** Tells the status sink, after the fact: a sink that throws is logged, never fails the call. */
  private report(tell: (sink: StatusSink) => void): void {
    try {
      tell(this.options.statusSink ?? noStatusSink);
    } catch (e) {
      this.log.warn({ err: (e as Error).message }, 'the status sink failed; the pod is attached regardless');
    }
  }

  check(req: AttachRequest): Promise<Result<void>> {
    return this.containerLocks.run(req.containerId, async () => {
      const record = await this.journal.load(req.containerId, req.ifname);
      const adopted = record ? undefined : await this.options.foreign?.check(req);
      if (adopted) return adopted;
      if (!record?.result || record.deleting) return err(new CniError(CniCode.UnknownContainer, `no attachment ${req.ifname} is known for container ${req.containerId}`));
      const verified = await this.verify(record.result, req.netns);
      if (!verified.ok) return verified;
      // Drivers with a CHECK of their own (delegated networks ask their plugins) get each attachment they made.
      for (const a of record.details?.attachments ?? []) {
        const driver = this.drivers.byRecordedType(a.driver);
        if (!driver?.check) continue;
        const tagged = stepsOf(record, a);
        // A v0 record tags no step: its details kept a delegated network's invocations.
        const steps = tagged.length ? tagged : (a.delegated ?? []);
        const r = await driver.check({ network: a.network, ifname: a.ifname, result: a.result, steps });
        if (!r.ok) return err(r.error.withContext(`CHECK of network ${a.network} (${a.ifname})`));
      }
      return ok(undefined);
    });
  }

  /** CHECK: every recorded interface, address and route is still there. */
  private async verify(result: CniResult, netns: string): Promise<Result<void>> {
    const problems: string[] = [];
    const sandboxes = [...new Set(result.interfaces.flatMap((i) => (i.sandbox ? [i.sandbox] : [])))];
    // A memif interface is a socket, neither a host nor a pod link.
    const hostNames = result.interfaces.filter((i) => !i.sandbox && !i.socketPath).map((i) => i.name);
    const inspect = async (ns: string | undefined): Promise<{ links: { name: string; index: number; mac?: string }[]; addrs: { index: number; address: string }[]; routes: { dst: string; gw?: string }[] } | string> => {
      const r = await this.kernel.batch(ns, [{ op: 'linkList' }, { op: 'addrList' }, { op: 'routeList' }]);
      if (!r.ok) return r.error.message;
      return { links: r.value[0], addrs: r.value[1], routes: r.value[2] };
    };
    if (sandboxes.some((s) => s !== netns)) problems.push(`the attachment was made in ${sandboxes.join(', ')}, CHECK asks about ${netns}`);
    const pod = await inspect(netns);
    if (typeof pod === 'string') return err(new CniError(CniCode.Internal, `CHECK: cannot inspect ${netns}: ${pod}`));
    for (const [i, iface] of result.interfaces.entries()) {
      if (!iface.sandbox) continue;
      const link = pod.links.find((l) => l.name === iface.name);
      if (!link) {
        problems.push(`interface ${iface.name} is missing in ${netns}`);
        continue;
      }
      if (iface.mac && link.mac !== iface.mac) problems.push(`interface ${iface.name} has MAC ${link.mac}, expected ${iface.mac}`);
      for (const ip of result.ips.filter((x) => x.interface === i)) {
        if (!pod.addrs.some((a) => a.index === link.index && a.address === ip.address)) problems.push(`address ${ip.address} is missing on ${iface.name}`);
      }
    }
    for (const route of result.routes) {
      if (!pod.routes.some((r) => r.dst === route.dst && (route.gw === undefined || r.gw === route.gw))) problems.push(`route ${route.dst}${route.gw ? ` via ${route.gw}` : ''} is missing in ${netns}`);
    }
    if (hostNames.length) {
      const host = await inspect(undefined);
      if (typeof host === 'string') return err(new CniError(CniCode.Internal, `CHECK: cannot inspect the host: ${host}`));
      for (const name of hostNames) if (!host.links.some((l) => l.name === name)) problems.push(`host interface ${name} is missing`);
    }
    return problems.length ? err(new CniError(CniCode.Internal, `CHECK failed: ${problems.join('; ')}`, problems.join('\n'))) : ok(undefined);
  }

  /** GC: removes every attachment of this runtime network that the runtime no longer lists, then orphaned leases. */
  async gc(req: GcRequest): Promise<Result<void>> {
    const valid = new Set(req.validAttachments.map((a) => `${a.containerId}\u0000${a.ifname}`));
    const swept = await this.sweep((r) => (r.meta.cniNetwork !== req.networkName || valid.has(`${r.meta.containerId}\u0000${r.meta.ifname}`) ? undefined : 'not listed by the runtime'), false);
    const failures = swept.failures.map((f) => f.error);
    // Sandboxes Multus made that the runtime no longer lists go as Multus would remove them.
    for (const s of this.adopted().filter((a) => !valid.has(`${a.containerId}\u0000${a.networks[0]?.ifname ?? ''}`))) {
      const r = await this.containerLocks.run(s.containerId, async () => this.options.foreign?.del({ containerId: s.containerId, netns: '', ifname: s.networks[0]?.ifname ?? '', args: { ips: [], ignoreUnknown: true, raw: [] } }));
      if (r?.kind === 'done' && !r.result.ok) failures.push(r.result.error.message);
    }
    return failures.length ? err(new CniError(CniCode.Internal, `GC could not remove ${failures.length} attachment(s)`, failures.join('; '))) : ok(undefined);
  }

  /**
   * Removes every attachment `stale` gives a reason for (the reason is asked again under the container's lock,
   * so an ADD or DEL that raced in wins), then releases leases without an attachment and lets delegated plugins
   * GC their own state. With `dryRun`, only says what it would remove.
   */
  async sweep(stale: (record: AttachmentRecord) => string | undefined, dryRun: boolean): Promise<SweepReport> {
    const removed: SweptAttachment[] = [];
    const failures: (SweptAttachment & { readonly error: string })[] = [];
    let kept = 0;
    for (const listed of await this.journal.list()) {
      const { containerId, ifname } = listed.meta;
      if (!stale(listed)) {
        kept++;
        continue;
      }
      const outcome = await this.containerLocks.run(containerId, async (): Promise<SweptAttachment | { error: string; reason: string } | undefined> => {
        const record = await this.journal.load(containerId, ifname);
        const reason = record && stale(record);
        if (!record || !reason) return undefined;
        if (dryRun) return { containerId, ifname, reason };
        const r = await this.undoRecord(record);
        return r.ok ? { containerId, ifname, reason } : { reason, error: r.error.message };
      });
      if (!outcome) kept++;
      else if ('error' in outcome) failures.push({ containerId, ifname, reason: outcome.reason, error: outcome.error });
      else {
        removed.push(outcome);
        if (!dryRun) this.log.info({ containerId, ifname, reason: outcome.reason }, 'GC removed a stale attachment');
      }
    }
    // A dry run changed nothing, so the leases it lists are exactly those a real GC releases after its removals
    // (a removed attachment's own leases go with its undo steps, not as orphans).
    const leases = await this.releaseOrphanedLeases(dryRun);
    if (dryRun) return { removed, kept, failures, leases, leasesReleased: 0, dryRun };
    if (leases.length) this.log.info({ released: leases.map((l) => `${l.network}/${l.address} (${l.containerId || 'no owner'} ${l.ifname})`) }, 'GC released leases without an attachment');
    for (const error of await this.gcDriverState()) failures.push({ containerId: '', ifname: '', reason: 'driver GC', error });
    return { removed, kept, failures, leases, leasesReleased: leases.length, dryRun };
  }

  /**
   * Drivers that keep state of their own (delegated plugins: host-local leases, for one) get a GC for each network
   * they run, listing the attachments Plexus still has on it there, so they can drop the rest.
   */
  private async gcDriverState(): Promise<string[]> {
    const records = await this.journal.list();
    // Read once per GC: listing them reads Multus's cache files.
    const adopted = this.adopted();
    const failures: string[] = [];
    for (const network of this.networks.list().networks) {
      const driver = this.drivers.for(network, delegationForced(network));
      if (!driver.gc) continue;
      const live = records.flatMap((r) => (r.details?.attachments ?? []).filter((a) => a.network === network.key && a.driver === driver.type).map((a) => ({ containerId: r.meta.containerId, ifname: a.ifname })));
      // Sandboxes Multus made still hold what their plugins gave them on this network.
      for (const s of adopted) for (const n of s.networks) if (n.name === network.cniName) live.push({ containerId: s.containerId, ifname: n.ifname });
      const r = await driver.gc(network, live, this.options.cniBinDir);
      if (!r.ok) failures.push(r.error.message);
    }
    return failures;
  }

  /** STATUS: ready when the daemon is, and when the default network's driver (its delegated plugins, if any) says so. */
  async status(req: Extract<CniRequest, { command: 'STATUS' }>): Promise<Result<void>> {
    const configured = configuredDefaultNetwork(req, this.options);
    if (!configured) return ok(undefined);
    const network = chooseDefaultNetwork({ configured, annotations: {}, podNamespace: 'default', networks: this.networks, isolation: {} });
    if (!network.ok) return err(new CniError(CniCode.PluginNotAvailable, `the default network is not usable: ${network.error.message}`));
    const driver = this.drivers.for(network.value, delegationForced(network.value));
    return driver.status ? driver.status(network.value, this.options.cniBinDir) : ok(undefined);
  }

  /**
   * Releases the leases that no journal record holds (see LeaseHolders), and returns them; with dryRun only
   * returns them. Each container's leases are checked again under its lock, against its records as they are
   * then, so an ADD that reserved an address after the first look keeps it.
   */
  async releaseOrphanedLeases(dryRun = false): Promise<Lease[]> {
    const holders = await this.journal.leaseHolders();
    const orphans = (await this.ipam.leases()).filter((lease) => !holders.holds(lease));
    if (dryRun || orphans.length === 0) return orphans;
    const released: Lease[] = [];
    const byContainer = new Map<string, Lease[]>();
    for (const lease of orphans) byContainer.set(lease.containerId, [...(byContainer.get(lease.containerId) ?? []), lease]);
    for (const [containerId, leases] of byContainer) {
      if (containerId === '') {
        // A lease file without an owner (torn by a crash mid-write) blocks its address for nobody.
        released.push(...(await this.ipam.releaseUnless((lease) => lease.containerId !== '')));
        continue;
      }
      await this.containerLocks.run(containerId, async () => {
        const current = await this.journal.leaseHolders(containerId);
        const owners = new Map(leases.filter((l) => !current.holds(l)).map((l) => [`${l.network}\u0000${l.ifname}`, l]));
        for (const { network, ifname } of owners.values()) {
          const r = await this.ipam.release(network, containerId, ifname);
          if (r.ok) released.push(...r.value);
          else this.log.error({ network, containerId, ifname, err: r.error.message }, 'could not release an orphaned lease; the next GC retries');
        }
      });
    }
    return released;
  }
}
