/**
 * CDI specs for prepared claims: what a claimed device needs in the container reaches it only through CDI (the kubelet
 * passes Prepare's `cdi_device_ids` to the runtime, which looks each up in the spec files of its CDI directories). A
 * claim with memif devices gets one spec, `<cdi dir>/plexus.io-<claim uid>.json` (kind plexus.io/memif, one CDI device
 * per claimed memif device, named `<claim uid>-<device>`), carrying exactly what the device plugin's Allocate gives a
 * memif pod (memifContainerEdits): the device's socket directory mounted at `<containerPath>/<device>`, MEMIF_SOCKET,
 * MEMIF_SECRET and PLEXUS_DEVICES_<resource>. Host devices need nothing in the container: no spec. A spec is written
 * (temp file made afresh, never through a link, fsync, rename) before Prepare answers, removed when the claim is freed,
 * and at start every spec of ours without a prepared record (a crash between the two) is removed.
 */
import { mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { MemifResource } from '../deviceplugin/config';
import { memifContainerEdits } from '../deviceplugin/memif-devices';
import type { PreparedClaim } from './prepared-claims';
import { removeRecordFile, writeRecordFile } from './record-files';

export const DEFAULT_CDI_DIR = '/var/run/cdi';
/** Mount `type` needs 0.4.0; 0.6.0 is read by every runtime with CDI (containerd 1.7 and later, CRI-O). */
export const CDI_VERSION = '0.6.0';
export const CDI_KIND = 'plexus.io/memif';
const SPEC_FILE = /^plexus\.io-([0-9a-zA-Z-]{1,64})\.json(\.tmp)?$/;

export interface CdiMount {
  readonly hostPath: string;
  readonly containerPath: string;
  readonly type: 'bind';
  readonly options: readonly string[];
}

export interface CdiContainerEdits {
  readonly env?: readonly string[];
  readonly mounts?: readonly CdiMount[];
}

export interface CdiSpec {
  readonly cdiVersion: string;
  readonly kind: string;
  readonly devices: readonly { readonly name: string; readonly containerEdits: CdiContainerEdits }[];
  readonly containerEdits?: CdiContainerEdits;
}

type RecordedDevice = PreparedClaim['devices'][number];

/** The spec file of a claim: named after the driver and the claim's UID, so no two drivers or claims share one. */
export const cdiSpecFile = (claimUid: string): string => `plexus.io-${claimUid}.json`;

/** The fully qualified CDI device ID of a claimed device (what Prepare answers). */
export const cdiDeviceId = (claimUid: string, device: string): string => `${CDI_KIND}=${claimUid}-${device}`;

/** Whether a recorded device needs something in the container (a memif device with its socket made). */
const needsCdi = (d: RecordedDevice): boolean => d.kind === 'memif' && Boolean(d.socket && d.secret);

/** The CDI device IDs of a recorded device: one for a memif device, none for a host device. */
export const cdiDeviceIds = (claimUid: string, d: RecordedDevice): string[] =>
  needsCdi(d) ? [cdiDeviceId(claimUid, d.device)] : [];

/**
 * The spec of a claim, or undefined when none of its devices needs one. Each CDI device mounts its socket directory;
 * the environment (MEMIF_SOCKET and MEMIF_SECRET of all the claim's memif devices of a resource, comma-separated as
 * Allocate gives them) is the spec's own edit, applied once whichever of its devices a container names.
 */
export function claimCdiSpec(
  claim: PreparedClaim,
  memifResource: (resourceName: string) => MemifResource | undefined,
): CdiSpec | undefined {
  const byResource = new Map<string, RecordedDevice[]>();
  for (const d of claim.devices.filter(needsCdi))
    byResource.set(d.resourceName, [...(byResource.get(d.resourceName) ?? []), d]);
  const devices: CdiSpec['devices'][number][] = [];
  const env = new Map<string, string>();
  for (const [resourceName, claimed] of byResource) {
    const config = memifResource(resourceName);
    if (!config) continue;
    const edits = memifContainerEdits(
      config,
      claimed.map((d) => ({ deviceID: d.deviceID, secret: d.secret ?? '' })),
    );
    for (const [k, v] of Object.entries(edits.envs)) env.set(k, v);
    claimed.forEach((d, i) => {
      const m = edits.mounts[i]!;
      const mount: CdiMount = {
        hostPath: m.host_path,
        containerPath: m.container_path,
        type: 'bind',
        options: ['rbind', m.read_only ? 'ro' : 'rw'],
      };
      devices.push({ name: `${claim.uid}-${d.device}`, containerEdits: { mounts: [mount] } });
    });
  }
  if (!devices.length) return undefined;
  return {
    cdiVersion: CDI_VERSION,
    kind: CDI_KIND,
    devices,
    containerEdits: { env: [...env].map(([k, v]) => `${k}=${v}`).sort() },
  };
}

/** The spec files of one CDI directory that this driver writes. */
export class CdiSpecs {
  constructor(
    readonly dir: string,
    private readonly memifResource: (resourceName: string) => MemifResource | undefined,
  ) {}

  /** Writes the claim's spec durably (the directory made if missing), or removes a stale one when it needs none. */
  write(claim: PreparedClaim): void {
    const spec = claimCdiSpec(claim, this.memifResource);
    if (!spec) return this.remove(claim.uid);
    mkdirSync(this.dir, { recursive: true, mode: 0o755 });
    writeRecordFile(this.dir, cdiSpecFile(claim.uid), `${JSON.stringify(spec, null, 2)}\n`);
  }

  /** The claim's spec gone (idempotent). */
  remove(claimUid: string): void {
    removeRecordFile(join(this.dir, cdiSpecFile(claimUid)));
  }

  /**
   * Removes every spec of ours (and temp file of one cut off by a crash) whose claim is not in `prepared`; answers the
   * paths removed. Other files of the directory (other drivers' specs) are never touched.
   */
  reconcile(prepared: ReadonlySet<string>): string[] {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return []; // no directory: nothing of ours in it
    }
    const removed: string[] = [];
    for (const name of names) {
      const m = SPEC_FILE.exec(name);
      if (!m || (!m[2] && prepared.has(m[1]!))) continue;
      removeRecordFile(join(this.dir, name));
      removed.push(join(this.dir, name));
    }
    return removed;
  }
}
