/**
 * Prepared claims, one small file each under <state>/dra/claims/<claim uid>.json, written (temp file, fsync, rename)
 * before NodePrepareResources answers and removed by NodeUnprepareResources. Loaded at start, so a plexusd restarted
 * between Prepare and the pod's CNI ADD still knows the pod's devices, and a device is never prepared for two claims.
 * The files are hostile input (record-files.ts): an entry that cannot be used is named in `problems` and held, and a
 * record is loaded only from the file named after its claim's UID.
 */
import { join } from 'node:path';
import { z } from 'zod';
import { firstIssue } from '../common/schema-issues';
import type { NetworkClaimedDevices, ClaimedNetworkDevice, PodClaims } from './claimed-devices';
import {
  claimsDirectory,
  readRecordFiles,
  removeRecordFile,
  writeRecordFile,
  type RecordFile,
  type RecordProblem,
} from './record-files';

export type { RecordProblem };

const UID = /^[0-9a-zA-Z-]{1,64}$/;

const RecordSchema = z.object({
  v: z.literal(1),
  uid: z.string().regex(UID),
  namespace: z.string(),
  name: z.string(),
  /** The pods the claim is reserved for when it was prepared (status.reservedFor). */
  pods: z.array(z.object({ name: z.string(), uid: z.string() })),
  devices: z.array(
    z.object({
      request: z.string(),
      pool: z.string(),
      device: z.string(),
      resourceName: z.string(),
      kind: z.enum(['host-device', 'memif']),
      deviceID: z.string(),
      network: z.object({ namespace: z.string(), name: z.string() }).optional(),
      interfaceName: z.string().optional(),
      ips: z.array(z.string()).optional(),
      mac: z.string().optional(),
      /** A memif device's socket on the host and its secret, made at Prepare (memif-sockets.ts). */
      socket: z.string().optional(),
      secret: z.string().optional(),
    }),
  ),
  preparedAt: z.string(),
});
export type PreparedClaim = z.infer<typeof RecordSchema>;
type RecordedDevice = PreparedClaim['devices'][number];

/** A claimed device as the engine sees it, with the memif socket its record keeps (memif-sockets.ts). */
export type RecordedNetworkDevice = ClaimedNetworkDevice & Pick<RecordedDevice, 'socket' | 'secret'>;

/** The record a file holds, or why it is not loaded. */
function parseRecord(file: RecordFile): PreparedClaim | string {
  let json: unknown;
  try {
    json = JSON.parse(file.text);
  } catch {
    return 'is not JSON';
  }
  const parsed = RecordSchema.safeParse(json);
  if (!parsed.success) return `is not a prepared-claim record: ${firstIssue(parsed.error, 'the record')}`;
  const uid = parsed.data.uid;
  if (file.name !== `${uid}.json`)
    return `holds claim ${uid}, but plexusd names a record <claim uid>.json: not loaded (moved or written by hand?)`;
  return parsed.data;
}

export class PreparedClaims implements NetworkClaimedDevices {
  private readonly claims = new Map<string, PreparedClaim>();
  /** What was not loaded, and why: each held where it is (the caller logs them). */
  readonly problems: RecordProblem[] = [];
  /** Why records cannot be written (the directory could not be made): Prepare then refuses, saying so. */
  private unwritable: string | undefined;

  private constructor(private readonly dir: string | undefined) {}

  /** Records under `stateDir`/dra/claims (made if missing); no stateDir keeps them in memory (tests). Never throws. */
  static open(stateDir: string | undefined): PreparedClaims {
    const dir = stateDir ? join(stateDir, 'dra', 'claims') : undefined;
    const store = new PreparedClaims(dir);
    if (!stateDir || !dir) return store;
    store.unwritable = claimsDirectory(stateDir, store.problems);
    if (store.unwritable) {
      store.problems.push({ path: dir, reason: `${store.unwritable}: no claim can be prepared until it can` });
      return store;
    }
    for (const file of readRecordFiles(dir, store.problems)) {
      const record = parseRecord(file);
      if (typeof record === 'string') store.problems.push({ path: file.path, reason: record });
      else store.claims.set(record.uid, record);
    }
    return store;
  }

  get(uid: string): PreparedClaim | undefined {
    return this.claims.get(uid);
  }

  all(): PreparedClaim[] {
    return [...this.claims.values()];
  }

  /** The claim (other than `exceptUid`) that holds a device, if any. */
  holder(pool: string, device: string, exceptUid?: string): PreparedClaim | undefined {
    return this.all().find((c) => c.uid !== exceptUid && c.devices.some((d) => d.pool === pool && d.device === device));
  }

  /** Writes the record durably, then keeps it. */
  record(claim: PreparedClaim): void {
    if (!UID.test(claim.uid)) throw new Error(`claim uid ${JSON.stringify(claim.uid)} is not a UID`);
    if (this.unwritable) throw new Error(this.unwritable);
    if (this.dir) writeRecordFile(this.dir, `${claim.uid}.json`, JSON.stringify(claim));
    this.claims.set(claim.uid, claim);
  }

  /** Forgets a claim (idempotent); answers whether it was prepared. */
  remove(uid: string): boolean {
    if (this.dir && UID.test(uid)) removeRecordFile(join(this.dir, `${uid}.json`));
    return this.claims.delete(uid);
  }

  /**
   * The claims recorded for the pod, then those it names that were prepared for other pods only (a shared claim
   * reserved for it later); of records of one name (a claim made again, its old record not yet released), the newest.
   */
  forPod(podUid: string, named?: PodClaims): RecordedNetworkDevice[] {
    const mine = this.all().filter((c) => c.pods.some((p) => p.uid === podUid));
    const newest = new Map<string, PreparedClaim>();
    for (const c of this.all()) {
      if (!named || c.namespace !== named.namespace || !named.claims.includes(c.name)) continue;
      if (mine.some((m) => m.namespace === c.namespace && m.name === c.name)) continue;
      const seen = newest.get(c.name);
      if (!seen || seen.preparedAt < c.preparedAt) newest.set(c.name, c);
    }
    return [...mine, ...newest.values()].flatMap((c) =>
      c.devices.map((d) => ({ claim: { namespace: c.namespace, name: c.name, uid: c.uid }, ...d })),
    );
  }

  forNetwork(
    podUid: string,
    network: { namespace: string; name: string },
    nadResourceName?: string,
  ): RecordedNetworkDevice | undefined {
    const devices = this.forPod(podUid);
    const named = devices.find((d) => d.network?.namespace === network.namespace && d.network.name === network.name);
    if (named) return named;
    return nadResourceName
      ? devices.find((d) => d.network === undefined && d.resourceName === nadResourceName)
      : undefined;
  }
}
