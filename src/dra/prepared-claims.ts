/**
 * Prepared claims, one small file each under <state>/dra/claims/<claim uid>.json, written (temp file, fsync, rename)
 * before NodePrepareResources answers and removed by NodeUnprepareResources. Loaded at start, so a plexusd restarted
 * between Prepare and the pod's CNI ADD still knows the pod's devices, and a device is never prepared for two claims.
 */
import {
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import type { ClaimedDevices, ClaimedNetworkDevice, PodClaims } from './claimed-devices';

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

export class PreparedClaims implements ClaimedDevices {
  private readonly claims = new Map<string, PreparedClaim>();
  /** Files that did not parse at load (kept on disk, named in the log by the caller). */
  readonly unreadable: string[] = [];

  private constructor(private readonly dir: string | undefined) {}

  /** Records under `stateDir`/dra/claims (made if missing); no stateDir keeps them in memory (tests). */
  static open(stateDir: string | undefined): PreparedClaims {
    const dir = stateDir ? join(stateDir, 'dra', 'claims') : undefined;
    const store = new PreparedClaims(dir);
    if (!dir) return store;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    for (const file of readdirSync(dir)) {
      if (file.endsWith('.tmp')) {
        rmSync(join(dir, file), { force: true }); // a write cut off by a crash: the claim was not answered prepared
        continue;
      }
      if (!file.endsWith('.json')) continue;
      try {
        const record = RecordSchema.parse(JSON.parse(readFileSync(join(dir, file), 'utf8')));
        store.claims.set(record.uid, record);
      } catch {
        store.unreadable.push(join(dir, file));
      }
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
    if (this.dir) {
      const path = join(this.dir, `${claim.uid}.json`);
      const tmp = `${path}.tmp`;
      const fd = openSync(tmp, 'w', 0o600);
      try {
        writeSync(fd, JSON.stringify(claim));
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, path);
      const dirFd = openSync(this.dir, 'r');
      try {
        fsyncSync(dirFd);
      } finally {
        closeSync(dirFd);
      }
    }
    this.claims.set(claim.uid, claim);
  }

  /** Forgets a claim (idempotent); answers whether it was prepared. */
  remove(uid: string): boolean {
    if (this.dir && UID.test(uid)) rmSync(join(this.dir, `${uid}.json`), { force: true });
    return this.claims.delete(uid);
  }

  /**
   * The claims recorded for the pod, then those it names that were prepared for other pods only (a shared claim
   * reserved for it later); of records of one name (a claim made again, its old record not yet released), the newest.
   */
  forPod(podUid: string, named?: PodClaims): ClaimedNetworkDevice[] {
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
  ): ClaimedNetworkDevice | undefined {
    const devices = this.forPod(podUid);
    const named = devices.find((d) => d.network?.namespace === network.namespace && d.network.name === network.name);
    if (named) return named;
    return nadResourceName
      ? devices.find((d) => d.network === undefined && d.resourceName === nadResourceName)
      : undefined;
  }
}
