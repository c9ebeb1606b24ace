/**
 * What the engine's verbs work with: its ports (kernel, IPAM, journal, networks, drivers), its settings, the
 * per-container locks, and the small pieces of state the engine keeps (the node's attachment quota, the recently
 * removed attachments). The engine (engine.ts) makes one of these and hands it to every verb; no verb sees the engine.
 */
import type { Logger } from 'pino';
import type { CniError } from '../cni/errors';
import type { CniRequest } from '../cni/request';
import type { KeyedMutex } from '../common/keyed-mutex';
import type { DriverRegistry } from '../drivers/registry';
import type { IpamBackend, Lease } from '../ipam';
import type { Journal } from './journal';
import type { KernelPort } from '../kernel/kernel';
import type { NetworkSource } from '../networks/source';
import type { AttachmentQuota } from './attachment-quota';
import type { ClaimedDevices, ClaimSink } from './claims/ports';
import type { ForeignSandboxes } from './foreign-sandboxes';
import type { DeviceSource } from './kubelet-devices';
import type { PlanSettings } from './plan';
import type { PodSource } from './pod-source';
import type { RecentlyRemoved } from './recently-removed';
import type { StatusSink } from './status-sink';
import type { BackgroundTeardown, TeardownSettings } from './teardown/background';
import type { TransactionPorts } from './transaction';

/** A call about one container's attachment. */
export type ContainerRequest = Extract<CniRequest, { command: 'ADD' | 'CHECK' | 'DEL' }>;

/** Pod annotations from the API (undefined: the runtime's are used). */
export type PodAnnotations = Readonly<Record<string, string>> | undefined;

/** What the node's operator decides (plexusd's flags): plain data, no behaviour. */
export interface EngineSettings extends PlanSettings {
  readonly hostLinkGroup?: number;
  readonly cniBinDir: string;
  /** Pod interfaces this node may hold at once (--max-node-attachments); unbounded when not set. */
  readonly maxNodeAttachments?: number;
  /** Where device plugins write NPWG device-info files (--device-info-dir); without it, none is read. */
  readonly deviceInfoDir?: string;
  /**
   * DEL answers once the record says the attachment is being torn down; its links, then its leases, go in the
   * background (teardown/). Without it (the in-memory kernel's tests), DEL undoes everything before it answers.
   */
  readonly teardown?: TeardownSettings;
}

/** What the engine reaches outside itself: the node's kernel, IPAM, journal and networks, and the optional sources and sinks. */
export interface EnginePorts {
  readonly kernel: KernelPort;
  readonly ipam: IpamBackend;
  readonly journal: Journal;
  readonly networks: NetworkSource;
  readonly drivers: DriverRegistry;
  /** Told what each pod's networks became (default: nobody). */
  readonly statusSink?: StatusSink;
  /** The Kubernetes API's view of pods (their UID and annotations); without it, the runtime's annotations are used. */
  readonly pods?: PodSource;
  /** The devices the kubelet allocated to pods, for networks that name a resource (default: none asked). */
  readonly devices?: DeviceSource;
  /** The devices of pods' DRA claims, read at ADD and when a running pod's networks change (default: none). */
  readonly claims?: ClaimedDevices;
  /** Told what each claimed device became (default: nobody). */
  readonly claimSink?: ClaimSink;
  /** Sandboxes another plugin made before Plexus served the node (Multus's), torn down as it would (default: none). */
  readonly foreign?: ForeignSandboxes;
}

/** What unit tests on the in-memory kernel replace; plexusd never sets these. */
export interface EngineSeams {
  /** Why a CNI_NETNS is not a pod's network namespace (default: NetnsGuard, which needs real namespaces). */
  readonly podNetnsProblem?: (path: string) => CniError | undefined;
}

/** Everything an AttachmentEngine is made from. */
export interface EngineWiring {
  readonly ports: EnginePorts;
  readonly settings: EngineSettings;
  readonly log: Logger;
  readonly seams?: EngineSeams;
}

/** How a sweep or a lease release runs: for real, or only saying what it would remove (`dryRun`). */
export interface SweepMode {
  readonly dryRun: boolean;
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

/** The ports the verbs use directly (the journal they reach through `tx`, the status sink through `report`). */
type VerbPorts = Omit<EnginePorts, 'journal' | 'statusSink'>;

export interface EngineContext extends VerbPorts {
  readonly settings: EngineSettings;
  readonly log: Logger;
  /** Calls for one container run one at a time. */
  readonly locks: KeyedMutex;
  /** The journal and the undo runner, as transactions use them. */
  readonly transactionPorts: TransactionPorts;
  readonly quota: AttachmentQuota;
  readonly recentlyRemoved: RecentlyRemoved;
  /** Why a CNI_NETNS is not a pod's network namespace (undefined when it is one). */
  readonly podNetnsProblem: (path: string) => CniError | undefined;
  /** Tells the status sink, after the fact: a sink that throws is logged, never fails the call. */
  readonly report: (tell: (sink: StatusSink) => void) => void;
  /** The background teardown, when DEL answers before the links are gone (EngineSettings.teardown). */
  readonly teardown?: BackgroundTeardown;
}
