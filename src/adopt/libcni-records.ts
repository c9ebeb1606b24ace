/**
 * libcni's records of the networks Multus attached: `<cniDir>/results/<network>-<container>-<ifname>`, one JSON file
 * per network of a sandbox, written by libcni after each network's ADD (the config it ran, base64; the result; the
 * netns; CNI_ARGS; the capability arguments) and removed after that network's successful DEL. They outlive Multus's
 * own cache of the sandbox when Multus's DEL failed part-way: Multus removes its cache after its first attempt whatever
 * the outcome, and libcni keeps the record of each network whose DEL failed. The one reader of these files.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { readBoundedFileSync } from '../common/bounded-file';
import { definedFields } from '../common/defined-fields';
import { isJsonObject } from '../common/json-object';

type Json = Record<string, unknown>;

/** A record this large is not libcni's (a config and a result, a few kilobytes). */
const MAX_RECORD_BYTES = 4 << 20;

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

const resultsDir = (cniDir: string): string => join(cniDir, 'results');

export const libcniRecordPath = (cniDir: string, network: string, containerId: string, ifname: string): string =>
  join(resultsDir(cniDir), `${network}-${containerId}-${ifname}`);

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

/** One network's record; empty when there is none or it is not JSON (libcni goes on without a cached result too). */
export function readLibcniRecord(cniDir: string, network: string, containerId: string, ifname: string): LibcniRecord {
  const raw = readFile(libcniRecordPath(cniDir, network, containerId, ifname));
  if (!raw) return {};
  return definedFields({
    config: typeof raw.config === 'string' ? decodedJson(raw.config) : undefined,
    result: isJsonObject(raw.result) ? raw.result : undefined,
    cniArgs: Array.isArray(raw.cniArgs) ? (raw.cniArgs as [string, string][]) : undefined,
    capabilityArgs: isJsonObject(raw.capabilityArgs) ? raw.capabilityArgs : undefined,
    netns: typeof raw.netns === 'string' ? raw.netns : undefined,
  });
}

/**
 * The network a record file names, checked: libcni's kind, names that give the file's own name, a config that is a
 * JSON object. A file that is not such a record names none.
 */
function recordedNetwork(cniDir: string, file: string): (RecordedNetwork & { containerId: string }) | undefined {
  const raw = readFile(join(resultsDir(cniDir), file));
  if (!raw || raw.kind !== 'cniCacheV1') return undefined;
  const { containerId, networkName, ifName, config } = raw;
  if (typeof containerId !== 'string' || typeof networkName !== 'string' || typeof ifName !== 'string')
    return undefined;
  if (file !== `${networkName}-${containerId}-${ifName}` || typeof config !== 'string') return undefined;
  const conf = decodedJson(config);
  if (!conf) return undefined;
  const text = JSON.stringify(conf);
  return { containerId, network: networkName, ifname: ifName, config: text, isList: Array.isArray(conf.plugins) };
}

/** Every recorded network here, or those whose file names could be the container's. */
function recordedNetworks(cniDir: string, containerId?: string): (RecordedNetwork & { containerId: string })[] {
  let files: string[];
  try {
    files = readdirSync(resultsDir(cniDir));
  } catch {
    return [];
  }
  const candidates = containerId === undefined ? files : files.filter((f) => f.includes(`-${containerId}-`));
  return candidates.flatMap((f) => {
    const n = recordedNetwork(cniDir, f);
    return n && (containerId === undefined || n.containerId === containerId) ? [n] : [];
  });
}

/** The networks libcni records for one container. */
export const recordedNetworksOf = (cniDir: string, containerId: string): RecordedNetwork[] =>
  recordedNetworks(cniDir, containerId);

/** The containers with a record here. */
export const containersWithLibcniRecords = (cniDir: string): string[] =>
  [...new Set(recordedNetworks(cniDir).map((n) => n.containerId))].sort();

/** The addresses a network's recorded result gave the interface (CIDR notation, as the result has them). */
export function recordedAddresses(cniDir: string, network: string, containerId: string, ifname: string): string[] {
  const ips = readLibcniRecord(cniDir, network, containerId, ifname).result?.ips;
  if (!Array.isArray(ips)) return [];
  return ips.flatMap((ip: unknown) =>
    isJsonObject(ip) && typeof ip.address === 'string' && ip.address.length <= 64 ? [ip.address] : [],
  );
}
