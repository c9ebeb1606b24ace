/**
 * libcni's records of the networks Multus attached: `<cniDir>/results/<network>-<container>-<ifname>`, one JSON file
 * per network of a sandbox, written by libcni after each network's ADD (the config it ran, the result, the netns,
 * CNI_ARGS) and removed after that network's successful DEL. They outlive Multus's own cache of the sandbox when
 * Multus's DEL failed part-way: Multus removes its cache after its first attempt whatever the outcome, and libcni keeps
 * the record of each network whose DEL failed.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { readBoundedFileSync } from '../common/bounded-file';

/** A record this large is not libcni's (a config and a result, a few kilobytes). */
const MAX_RECORD_BYTES = 4 << 20;

const RecordSchema = z
  .object({
    kind: z.literal('cniCacheV1'),
    containerId: z.string().min(1),
    config: z.string().min(1),
    ifName: z.string().min(1),
    networkName: z.string().min(1),
  })
  .passthrough();

/** One network of a sandbox as libcni recorded its ADD. */
export interface LibcniRecord {
  readonly containerId: string;
  readonly network: string;
  readonly ifname: string;
  /** The config the plugins ran with (JSON text). */
  readonly config: string;
  readonly isList: boolean;
}

export const libcniResultsDir = (cniDir: string): string => join(cniDir, 'results');

/**
 * One record file, read whole and checked: kind, names that give the file's own name, a config that is a JSON object.
 * A file that is not such a record is none (undefined).
 */
function readRecord(dir: string, name: string): LibcniRecord | undefined {
  const read = readBoundedFileSync(join(dir, name), { maxBytes: MAX_RECORD_BYTES });
  if (!read.ok) return undefined;
  try {
    const parsed = RecordSchema.safeParse(JSON.parse(read.value.toString('utf8')));
    if (!parsed.success) return undefined;
    const r = parsed.data;
    if (name !== `${r.networkName}-${r.containerId}-${r.ifName}`) return undefined;
    const config = Buffer.from(r.config, 'base64').toString('utf8');
    const conf: unknown = JSON.parse(config);
    if (typeof conf !== 'object' || conf === null || Array.isArray(conf)) return undefined;
    const isList = Array.isArray((conf as { plugins?: unknown }).plugins);
    return { containerId: r.containerId, network: r.networkName, ifname: r.ifName, config, isList };
  } catch {
    return undefined; // not JSON, or a config that is not
  }
}

/** Every record in the directory, or those whose file names could be the container's. */
function readRecords(cniDir: string, containerId?: string): LibcniRecord[] {
  const dir = libcniResultsDir(cniDir);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const candidates = containerId === undefined ? names : names.filter((n) => n.includes(`-${containerId}-`));
  return candidates.flatMap((n) => {
    const record = readRecord(dir, n);
    return record && (containerId === undefined || record.containerId === containerId) ? [record] : [];
  });
}

/** The records of one container's networks. */
export const libcniRecordsOf = (cniDir: string, containerId: string): LibcniRecord[] =>
  readRecords(cniDir, containerId);

/** The containers with a record here. */
export const containersWithLibcniRecords = (cniDir: string): string[] =>
  [...new Set(readRecords(cniDir).map((r) => r.containerId))].sort();
