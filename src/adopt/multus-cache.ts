/**
 * Multus's per-sandbox cache, as Multus v4 writes it at ADD (saveDelegates): `<cniDir>/<containerID>` holds the JSON
 * list of the sandbox's delegates in attach order, each with the exact config bytes it ran with (`Bytes`, base64, as
 * Go encodes a byte slice) and what the pod asked of it. Multus's own DEL reads it back; so does Plexus's adoption.
 * Every name in it is checked (cache-names.ts): a delegate whose names libcni would refuse is refused, not run.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { readBoundedFileSync } from '../common/bounded-file';
import { cniNameProblem } from '../cni/names';
import { cachedNamesProblem } from './cache-names';
import { errorMessage } from '../common/error-message';
import { definedFields } from '../common/defined-fields';

/** A cache this large is not Multus's (a pod's delegates are a few kilobytes). */
const MAX_CACHE_BYTES = 4 << 20;

const DelegateSchema = z
  .object({
    Name: z.string().optional(),
    Bytes: z.string().min(1),
    ifnameRequest: z.string().optional(),
    macRequest: z.string().optional(),
    ipRequest: z.array(z.string()).optional(),
    infinibandGUIDRequest: z.string().optional(),
    deviceID: z.string().optional(),
  })
  .passthrough();
const CacheSchema = z.array(DelegateSchema).min(1);

/** One delegate of a Multus sandbox: its config as it ran, and the interface it got. */
export interface CachedDelegate {
  /** The name Multus shows for it (the NAD's). */
  readonly name: string;
  /** The network's CNI name, as libcni files its record under (checked). */
  readonly network: string;
  /** The conf or conflist bytes Multus handed to libcni. */
  readonly config: string;
  /** A conflist (`plugins`), not a single conf. */
  readonly isList: boolean;
  /** Checked as an interface name. */
  readonly ifname: string;
  readonly mac?: string;
  readonly ips: readonly string[];
  readonly deviceID?: string;
  /** The cache file it was read from, for messages. */
  readonly source: string;
}

/** A delegate that is never run: where it is in the list, what it is called, and why. */
export interface RefusedDelegate {
  readonly position: number;
  readonly name: string;
  readonly reason: string;
}

export type CacheRead =
  | { readonly kind: 'absent' }
  | {
      readonly kind: 'delegates';
      readonly path: string;
      readonly delegates: readonly CachedDelegate[];
      readonly refused: readonly RefusedDelegate[];
    }
  | { readonly kind: 'broken'; readonly path: string; readonly reason: string }
  /** Not a file Multus writes (a directory, a FIFO, a symbolic link): left alone. */
  | { readonly kind: 'not-a-file'; readonly path: string; readonly reason: string };

/** Container IDs are file names here, by libcni's rule for them: anything else is not a cache Multus wrote. */
export const isContainerId = (id: string): boolean => cniNameProblem(id) === undefined && id.length <= 255;

/** The cache of one sandbox; `ifname` is CNI_IFNAME (the first delegate's interface, as Multus names it). */
export function readMultusCache(cacheDir: string, containerId: string, ifname: string): CacheRead {
  if (!isContainerId(containerId)) return { kind: 'absent' };
  const path = join(cacheDir, containerId);
  const read = readBoundedFileSync(path, { maxBytes: MAX_CACHE_BYTES });
  if (!read.ok) {
    if (read.error.kind === 'missing') return { kind: 'absent' };
    if (read.error.kind === 'not-regular') return { kind: 'not-a-file', path, reason: read.error.reason };
    return { kind: 'broken', path, reason: read.error.reason };
  }
  let json: unknown;
  try {
    json = JSON.parse(read.value.toString('utf8'));
  } catch (e) {
    return { kind: 'broken', path, reason: `not JSON (${errorMessage(e)})` };
  }
  const parsed = CacheSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return {
      kind: 'broken',
      path,
      reason: `not a list of Multus delegates: ${issue?.path.join('.') || 'the list'} ${issue?.message ?? ''}`.trim(),
    };
  }
  const delegates: CachedDelegate[] = [];
  const refused: RefusedDelegate[] = [];
  for (const [i, d] of parsed.data.entries()) {
    const config = decodeConfig(d.Bytes);
    if (config === undefined)
      return { kind: 'broken', path, reason: `delegate ${i}: its config is not base64-encoded JSON` };
    const name = d.Name ?? config.name;
    // Multus's getIfname: the requested name, the first (master) delegate's CNI_IFNAME, else net<position>.
    const delegateIfname = d.ifnameRequest || (i === 0 ? ifname : `net${i}`);
    // libcni files its record under the config's name.
    const network = config.name || name;
    const problem = cachedNamesProblem({ network, ifname: delegateIfname });
    if (problem !== undefined) {
      refused.push({ position: i, name, reason: problem });
      continue;
    }
    delegates.push({
      name,
      network,
      config: config.text,
      isList: config.isList,
      ifname: delegateIfname,
      ...definedFields({ mac: d.macRequest || undefined }),
      ips: d.ipRequest ?? [],
      ...definedFields({ deviceID: d.deviceID || undefined }),
      source: path,
    });
  }
  return { kind: 'delegates', path, delegates, refused };
}

/** The container IDs with a cache in the directory (Multus's `results/` holds libcni's caches, not sandboxes). */
export function listMultusCaches(cacheDir: string): string[] {
  try {
    return readdirSync(cacheDir, { withFileTypes: true })
      .filter((e) => e.isFile() && isContainerId(e.name))
      .map((e) => e.name)
      .sort();
  } catch {
    return [];
  }
}

function decodeConfig(base64: string): { text: string; name: string; isList: boolean } | undefined {
  const text = Buffer.from(base64, 'base64').toString('utf8');
  try {
    const conf = JSON.parse(text) as { name?: unknown; plugins?: unknown };
    if (typeof conf !== 'object' || conf === null) return undefined;
    return { text, name: typeof conf.name === 'string' ? conf.name : '', isList: Array.isArray(conf.plugins) };
  } catch {
    return undefined;
  }
}
