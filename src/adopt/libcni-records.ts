/**
 * libcni's records of the networks Multus attached: `<cniDir>/results/<network>-<container>-<ifname>`, one JSON file
 * per network of a sandbox, written by libcni after each network's ADD (the config it ran, base64; the result; the
 * netns; CNI_ARGS; the capability arguments) and removed after that network's successful DEL. They outlive Multus's
 * own cache of the sandbox when Multus's DEL failed part-way: Multus removes its cache after its first attempt whatever
 * the outcome, and libcni keeps the record of each network whose DEL failed. The one reader of these files; every name
 * in them is checked (cache-names.ts) before it goes into a path or an exec.
 */
import { join } from 'node:path';
import { z } from 'zod';
import { readBoundedFileSync } from '../common/bounded-file';
import { definedFields } from '../common/defined-fields';
import { isJsonObject } from '../common/json-object';
import { cachedNamesProblem, entryOf } from './cache-names';

type Json = Record<string, unknown>;

/** A record this large is not libcni's (a config and a result, a few kilobytes). */
const MAX_RECORD_BYTES = 4 << 20;

/** CNI_ARGS as libcni records them: pairs that join back into `K=V;K=V` as they were. */
const CniArgsSchema = z.array(
  z.tuple([z.string().regex(/^[^;=]+$/), z.string().regex(/^[^;]*$/)]).transform(([k, v]) => [k, v] as const),
);

/** What libcni recorded of one network's ADD; each field only when the file has it in the expected shape. */
export interface LibcniRecord {
  /** The network's config exactly as it ran (libcni keeps the bytes it executed the plugins with). */
  readonly config?: Json;
  readonly result?: Json;
  readonly cniArgs?: readonly (readonly [string, string])[];
  readonly capabilityArgs?: Json;
  /** The sandbox's netns at ADD. */
  readonly netns?: string;
}

/** A network a record names, with the config it ran: enough to run its DEL. */
export interface RecordedNetwork {
  readonly network: string;
  readonly ifname: string;
  /** The config as JSON text. */
  readonly config: string;
  readonly isList: boolean;
  /** The record file, for messages. */
  readonly source: string;
}

/** What a listing needs of a record: whose it is, and the pod and netns of its ADD. */
export interface RecordSummary extends Pick<LibcniRecord, 'cniArgs' | 'netns'> {
  readonly containerId: string;
  readonly network: string;
  readonly ifname: string;
}

/** A record file whose names libcni would never have written: never run, never removed. */
export interface RefusedRecord {
  readonly path: string;
  readonly reason: string;
}

/** A JSON object from base64 (how Go encodes a byte slice), or undefined when it is not one. */
function decodedJson(base64: string): Json | undefined {
  try {
    const v: unknown = JSON.parse(Buffer.from(base64, 'base64').toString('utf8'));
    return isJsonObject(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

export const libcniResultsDir = (cniDir: string): string => join(cniDir, 'results');

/** libcni's file name for a network's record. */
export const libcniRecordName = (network: string, containerId: string, ifname: string): string =>
  `${network}-${containerId}-${ifname}`;

/** The record's path; undefined when the names would make a path outside the results directory. */
export const libcniRecordPath = (
  cniDir: string,
  network: string,
  containerId: string,
  ifname: string,
): string | undefined => entryOf(libcniResultsDir(cniDir), libcniRecordName(network, containerId, ifname));

/** The file as JSON with the names it holds; undefined when it cannot be read or is not a JSON object. */
function readFile(path: string): Json | undefined {
  const file = readBoundedFileSync(path, { maxBytes: MAX_RECORD_BYTES });
  if (!file.ok) return undefined;
  try {
    const raw: unknown = JSON.parse(file.value.toString('utf8'));
    return isJsonObject(raw) ? raw : undefined;
  } catch {
    return undefined;
  }
}

const cniArgsOf = (raw: Json): LibcniRecord['cniArgs'] => {
  const parsed = CniArgsSchema.safeParse(raw.cniArgs);
  return parsed.success ? parsed.data : undefined;
};

/** One network's record; empty when there is none or it is not JSON (libcni goes on without a cached result too). */
export function readLibcniRecord(cniDir: string, network: string, containerId: string, ifname: string): LibcniRecord {
  const path = libcniRecordPath(cniDir, network, containerId, ifname);
  const raw = path === undefined ? undefined : readFile(path);
  if (!raw) return {};
  return definedFields({
    config: typeof raw.config === 'string' ? decodedJson(raw.config) : undefined,
    result: isJsonObject(raw.result) ? raw.result : undefined,
    cniArgs: cniArgsOf(raw),
    capabilityArgs: isJsonObject(raw.capabilityArgs) ? raw.capabilityArgs : undefined,
    netns: typeof raw.netns === 'string' && raw.netns.startsWith('/') ? raw.netns : undefined,
  });
}

/**
 * A record file's names, checked: libcni's kind, names that give the file's own name and that libcni accepts. A file
 * that is not such a record names none; one whose names libcni would refuse is refused.
 */
export function readRecordSummary(
  cniDir: string,
  file: string,
): { summary?: RecordSummary; raw?: Json; refused?: RefusedRecord } {
  const path = join(libcniResultsDir(cniDir), file);
  const raw = readFile(path);
  if (!raw || raw.kind !== 'cniCacheV1') return {};
  const { containerId, networkName: network, ifName: ifname } = raw;
  if (typeof containerId !== 'string' || typeof network !== 'string' || typeof ifname !== 'string') return {};
  if (typeof raw.config !== 'string') return {};
  if (file !== libcniRecordName(network, containerId, ifname)) return {};
  const problem = cachedNamesProblem({ containerId, network, ifname });
  if (problem !== undefined) return { refused: { path, reason: problem } };
  const netns = typeof raw.netns === 'string' && raw.netns.startsWith('/') ? raw.netns : undefined;
  return { summary: definedFields({ containerId, network, ifname, cniArgs: cniArgsOf(raw), netns }), raw };
}

/** The networks libcni records for one container among `files`, and the records of it that are refused. */
export function recordedNetworksOf(
  cniDir: string,
  containerId: string,
  files: readonly string[],
): { networks: RecordedNetwork[]; refused: RefusedRecord[] } {
  const networks: RecordedNetwork[] = [];
  const refused: RefusedRecord[] = [];
  for (const file of files) {
    const read = readRecordSummary(cniDir, file);
    if (read.refused) refused.push(read.refused);
    const { summary, raw } = read;
    if (!summary || summary.containerId !== containerId || typeof raw?.config !== 'string') continue;
    const conf = decodedJson(raw.config);
    if (!conf) continue;
    networks.push({
      network: summary.network,
      ifname: summary.ifname,
      config: JSON.stringify(conf),
      isList: Array.isArray(conf.plugins),
      source: join(libcniResultsDir(cniDir), file),
    });
  }
  return { networks, refused };
}

/** Reverse attach order, as far as records tell it: other interfaces by name, last first; the runtime's last. */
export const inDelOrder = <T extends { readonly ifname: string }>(records: readonly T[], runtimeIfname: string): T[] =>
  [...records].sort((a, b) =>
    a.ifname === runtimeIfname
      ? 1
      : b.ifname === runtimeIfname
        ? -1
        : b.ifname.localeCompare(a.ifname, 'en', { numeric: true }),
  );

/** The addresses a network's recorded result gave the interface (CIDR notation, as the result has them). */
export function recordedAddresses(cniDir: string, network: string, containerId: string, ifname: string): string[] {
  const ips = readLibcniRecord(cniDir, network, containerId, ifname).result?.ips;
  if (!Array.isArray(ips)) return [];
  return ips.flatMap((ip: unknown) =>
    isJsonObject(ip) && typeof ip.address === 'string' && ip.address.length <= 64 ? [ip.address] : [],
  );
}
