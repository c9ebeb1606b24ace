/**
 * Plexus as a DRA driver (plexus.io): the devices of the resources file that offer `dra`, published as this node's
 * ResourceSlices; the kubelet plugin (registration + NodePrepareResources/NodeUnprepareResources); the prepared
 * claims, which the engine reads through ClaimedDevices (claimed-devices.ts) at CNI ADD. docs/dra.md has the model.
 */
import type { Logger } from 'pino';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import type { ResourceConfig } from '../deviceplugin/config';
import type { MemifDeviceSocket } from '../drivers/memif';
import type { KubeApiClient } from '../k8s/api-client';
import type { StatusSink } from '../engine/status-sink';
import type { IsolationSettings } from '../networks/isolation';
import type { NetworkReader } from '../networks/source';
import { ClaimStatusSink } from './claim-status-sink';
import { ApiClaimReader, type ClaimReader } from './claims-api';
import type { NetworkClaimedDevices } from './claimed-devices';
import { DraInventory } from './devices';
import { DraPluginServer, type RegistrationEvents } from './plugin-server';
import { ClaimPreparer } from './prepare';
import { PreparedClaims } from './prepared-claims';
import { checkedClaims, recordedDeviceProblem, recordProblems } from './record-checks';
import { SlicePublisher } from './slices';
import { ApiPodPresence, type PodPresence } from './stale-claims';
import { CdiSpecs } from './cdi-specs';
import { memifContainerSocket } from '../deviceplugin/memif-devices';
import { errorMessage } from '../common/error-message';
import { definedFields } from '../common/defined-fields';

export interface DraSettings {
  readonly nodeName: string;
  /** The kubelet's --root-dir (plugins_registry/ and plugins/ are under it). */
  readonly kubeletRoot: string;
  /** plexusd's state dir: prepared claims live in <stateDir>/dra/claims. */
  readonly stateDir?: string;
  /** How often the slices are checked against the devices (and brought back if wiped). */
  readonly resyncMs?: number;
  readonly sysfsRoot?: string;
  readonly inUseByDevicePlugin?: (resourceName: string, deviceID: string) => Promise<boolean>;
  readonly events?: RegistrationEvents;
  /** The NADs a claim's config may name: Prepare refuses a claim naming one the API does not have. */
  readonly networks?: NetworkReader;
  /** The engine's namespace isolation, applied to the NAD a claim names. */
  readonly isolation?: IsolationSettings;
  /** UIDs of the pods with networks on this node (the engine's records): their claims are never stale. */
  readonly attachedPods?: () => Promise<ReadonlySet<string>>;
  /** How often prepared claims nobody will unprepare are looked for (also once at start). */
  readonly staleCheckMs?: number;
  /**
   * The CDI directory prepared claims' specs go in (plexusd: --cdi-dir, /var/run/cdi by default); absent: no spec is
   * written and Prepare answers no CDI device IDs (a memif claim's container then gets nothing of its device).
   */
  readonly cdiDir?: string;
  /** Where memif devices' device-info files go (--device-info-dir), as the device plugin writes them; absent: none. */
  readonly deviceInfoDir?: string;
  /** How long the kubelet may be without a connection to the DRA socket before it counts as gone (default 2 s). */
  readonly kubeletLostAfterMs?: number;
}

/** What the driver reads and writes outside the node: the API, through these. */
export interface DraPorts {
  /** The ResourceSlices and the claims' status are written here. */
  readonly api: KubeApiClient;
  /** The ResourceClaims Prepare reads (default: the API's). */
  readonly claims?: ClaimReader;
  /** Whether a prepared claim's pods still exist (default: the API's). */
  readonly pods?: PodPresence;
}

/** The entries of the records' directory that were not loaded, and records that do not fit the resources file. */
function reportRecords(prepared: PreparedClaims, inventory: DraInventory, log: Logger): void {
  for (const { path, reason } of prepared.problems)
    log.warn({ path, reason }, 'prepared-claim entry not loaded: held where it is, not acted on');
  for (const record of prepared.all()) {
    const problems = recordProblems(inventory, record);
    if (problems.length)
      log.warn(
        { claim: `${record.namespace}/${record.name}`, uid: record.uid, problems },
        'prepared claim names what this node does not offer: its devices are not acted on',
      );
  }
}

const socketRefused = (resourceName: string, deviceID: string, why: string): CniError =>
  new CniError(
    CniCode.InvalidEnvironment,
    `the memif socket a prepared claim records for ${resourceName} ${deviceID} is not served: ${why}`,
  );

export class DraDriver {
  readonly inventory: DraInventory;
  readonly prepared: PreparedClaims;
  readonly slices: SlicePublisher;
  readonly plugin: DraPluginServer;
  /** Where the engine reports what each claimed device became (the claims' status.devices[]). */
  readonly claimStatus: ClaimStatusSink;
  private readonly preparer: ClaimPreparer;
  private readonly claimReader: ClaimReader;
  private readonly podPresence: PodPresence;
  private readonly cdi: CdiSpecs | undefined;
  private staleTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** The slices' first reconcile is under way or done (after the start's stale-record look). */
  private publishing = false;

  private constructor(
    resources: readonly ResourceConfig[],
    ports: DraPorts,
    private readonly settings: DraSettings,
    private readonly log: Logger,
  ) {
    const { api } = ports;
    const { nodeName, sysfsRoot } = settings;
    this.inventory = new DraInventory(resources, { nodeName, ...definedFields({ sysfsRoot: sysfsRoot || undefined }) });
    this.prepared = PreparedClaims.open(settings.stateDir);
    reportRecords(this.prepared, this.inventory, log);
    this.cdi = settings.cdiDir ? new CdiSpecs(settings.cdiDir, (r) => this.inventory.memifResource(r)) : undefined;
    this.reconcileCdiSpecs();
    const held = (pool: string, device: string): boolean => this.prepared.holder(pool, device) !== undefined;
    // Offered only while the kubelet knows the driver: a pod scheduled onto a device the kubelet cannot have prepared
    // waits for the kubelet's resync (60-90 s) after its Prepare is refused.
    this.slices = new SlicePublisher(
      api,
      settings.nodeName,
      () => (this.stopped || !this.plugin.kubeletKnows ? [] : this.inventory.pools(held)),
      log.child({ component: 'dra-slices' }),
    );
    this.claimStatus = new ClaimStatusSink(api, log.child({ component: 'dra-claim-status' }));
    this.claimReader = ports.claims ?? new ApiClaimReader(api);
    this.podPresence = ports.pods ?? new ApiPodPresence(api);
    this.preparer = new ClaimPreparer({
      claims: this.claimReader,
      inventory: this.inventory,
      prepared: this.prepared,
      ...definedFields({
        inUseByDevicePlugin: settings.inUseByDevicePlugin,
        networks: settings.networks,
        isolation: settings.isolation,
      }),
      ...(this.cdi ? { cdi: this.cdi } : {}),
      ...definedFields({ deviceInfoDir: settings.deviceInfoDir || undefined }),
      changed: () => void this.slices.reconcile(),
      log: log.child({ component: 'dra' }),
    });
    const { kubeletLostAfterMs } = settings;
    this.plugin = new DraPluginServer(
      settings.kubeletRoot,
      this.preparer,
      log.child({ component: 'dra-plugin' }),
      this.registrationEvents(settings.events ?? {}),
      kubeletLostAfterMs === undefined ? {} : { kubeletLostAfterMs },
    );
  }

  /**
   * A crash between a spec's write and its record's (or between their removals) leaves a spec nobody answers for: every
   * spec of ours whose claim has no record (loaded or held as unreadable) is removed before the kubelet is served.
   */
  private reconcileCdiSpecs(): void {
    if (!this.cdi) return;
    const known = new Set(this.prepared.all().map((c) => c.uid));
    for (const p of this.prepared.problems) known.add(/([0-9a-zA-Z-]{1,64})\.json$/.exec(p.path)?.[1] ?? '');
    try {
      const removed = this.cdi.reconcile(known);
      if (removed.length) this.log.warn({ removed }, 'CDI specs of claims with no prepared record removed');
    } catch (e) {
      this.log.warn({ dir: this.cdi.dir, err: errorMessage(e) }, 'reconciling the CDI specs failed');
    }
  }

  /** The caller's registration events, and the slices reconciled each time the kubelet's knowledge changes. */
  private registrationEvents(events: RegistrationEvents): RegistrationEvents {
    return {
      registered: (status) => events.registered?.(status),
      knownChanged: (known, reason) => {
        events.knownChanged?.(known, reason);
        if (this.publishing) void this.slices.reconcile();
      },
    };
  }

  /** Nothing to offer (no resource of the file offers dra): undefined. */
  static create(
    resources: readonly ResourceConfig[],
    ports: DraPorts,
    settings: DraSettings,
    log: Logger,
  ): DraDriver | undefined {
    const driver = new DraDriver(resources, ports, settings, log);
    return driver.inventory.offered.length ? driver : undefined;
  }

  /**
   * The socket of a memif device a prepared claim holds (for the memif driver at ADD); undefined when no claim holds
   * that device. With CDI the container sees it under the resource's containerPath (the claim's spec mounts it there);
   * without, where the host has it.
   */
  memifSocket(resourceName: string, deviceID: string): Result<MemifDeviceSocket> | undefined {
    const held = this.prepared
      .all()
      .flatMap((c) => c.devices)
      .find((d) => d.resourceName === resourceName && d.deviceID === deviceID && d.socket && d.secret);
    if (!held?.socket || !held.secret) return undefined;
    const why = recordedDeviceProblem(this.inventory, held);
    if (why) return err(socketRefused(resourceName, deviceID, why));
    const config = this.cdi ? this.inventory.memifResource(resourceName) : undefined;
    const podSocket = config ? memifContainerSocket(config, deviceID) : held.socket;
    return ok({ hostSocket: held.socket, podSocket, secret: held.secret });
  }

  /** What the engine asks at ADD: the devices of a pod's prepared claims. */
  get claimed(): NetworkClaimedDevices {
    return checkedClaims(this.prepared, this.inventory);
  }

  /**
   * The claims' side of the engine's status reports: when a pod's networks are gone (DEL), plexusd's entries leave the
   * status of the claims whose devices it held.
   */
  get statusSink(): StatusSink {
    return {
      attached: () => undefined,
      failed: () => undefined,
      detached: (pod) => {
        const devices = pod.uid ? this.prepared.forPod(pod.uid) : [];
        if (devices.length) this.claimStatus.released(pod, devices);
      },
    };
  }

  /**
   * Serves the kubelet plugin at once: Prepare needs only the records (loaded already) and the API client, and a
   * Prepare the kubelet cannot make costs the pod a resync (60-90 s, kubernetes/kubernetes#139836). Stale records are
   * looked for first: Prepare calls queue behind that look, so none is refused for a device a stale record holds. The
   * slices are reconciled after it, in the background: published once the kubelet has registered the driver (slices
   * left by an earlier plexusd are withdrawn until then).
   */
  async start(): Promise<void> {
    const stale = this.releaseStale();
    await this.plugin.start();
    this.log.info(
      { pools: this.inventory.offered.map((r) => r.name), sockets: this.plugin.sockets },
      'DRA driver plexus.io started',
    );
    void stale
      .then(() => {
        if (this.stopped) return undefined;
        this.publishing = true;
        return this.slices.start(this.settings.resyncMs ?? 10000);
      })
      .catch((e: unknown) => this.log.warn({ err: errorMessage(e) }, 'publishing the ResourceSlices failed'));
    this.staleTimer = setInterval(() => void this.releaseStale(), this.settings.staleCheckMs ?? 60000);
    this.staleTimer.unref();
  }

  /** Releases the prepared claims nobody will unprepare (stale-claims.ts); answers their claims. */
  releaseStale(): Promise<string[]> {
    const { attachedPods } = this.settings;
    return this.preparer
      .releaseStale({
        claims: this.claimReader,
        pods: this.podPresence,
        log: this.log,
        ...definedFields({ attachedPods }),
      })
      .catch((e: unknown) => {
        this.log.warn({ err: errorMessage(e) }, 'looking for stale prepared claims failed; trying again later');
        return [];
      });
  }

  /**
   * Withdraws the slices while the plugin still answers (no pod is scheduled onto a device nobody will prepare), lets
   * the claims' status writes end, then closes the plugin. Each wait is bounded: an API that does not answer leaves
   * the slices to the kubelet, which deletes them 30 s after the driver is gone.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.staleTimer) clearInterval(this.staleTimer);
    this.slices.stop();
    const withdrawn = this.slices.reconcile().then((changes) => {
      if (changes.failed.length) this.log.warn({ failed: changes.failed }, 'ResourceSlices not all withdrawn at stop');
    });
    await within(Promise.all([withdrawn, this.claimStatus.idle()]), STOP_WAIT_MS);
    await this.plugin.stop();
  }
}

/** How long the stop waits for the slices' withdrawal and the claims' status writes. */
const STOP_WAIT_MS = 2000;

/** Resolves when `work` settles or after `ms`, whichever comes first. */
async function within(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeUp = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  await Promise.race([work.catch(() => undefined), timeUp]);
  clearTimeout(timer);
}
