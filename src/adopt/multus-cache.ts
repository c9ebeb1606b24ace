/**
 * Multus's per-sandbox cache, as Multus v4 writes it at ADD (saveDelegates): `<cniDir>/<containerID>` holds the JSON
 * list of the sandbox's delegates in attach order, each with the exact config bytes it ran with (`Bytes`, base64, as
 * Go encodes a byte slice) and what the pod asked of it. Multus's own DEL reads it back; so does Plexus's adoption.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { readBoundedFileSync } from '../common/bounded-file';

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
  readonly name: string;
  /** The conf or conflist bytes Multus handed to libcni. */
  readonly config: string;
  /** A conflist (`plugins`), not a single conf. */
  readonly isList: boolean;
  readonly ifname: string;
  readonly mac?: string;
  readonly ips: readonly string[];
  readonly deviceID?: string;
}

export type CacheRead =
  | { readonly kind: 'absent' }
  | { readonly kind: 'delegates'; readonly path: string; readonly delegates: readonly CachedDelegate[] }
  | { readonly kind: 'broken'; readonly path: string; readonly reason: string };

/** Container IDs are file names here: anything else is not a cache Multus could have written. */
const isFileName = (id: string): boolean =>
  id !== '' && id !== '.' && id !== '..' && !id.includes('/') && !id.includes('\0') && id.length <= 255;

/** The cache of one sandbox; `ifname` is CNI_IFNAME (the first delegate's interface, as Multus names it). */
export function readMultusCache(cacheDir: string, containerId: string, ifname: string): CacheRead {
  if (!isFileName(containerId)) return { kind: 'absent' };
  const path = join(cacheDir, containerId);
  const read = readBoundedFileSync(path, { maxBytes: MAX_CACHE_BYTES });
  if (!read.ok)
    return read.error.kind === 'missing' ? { kind: 'absent' } : { kind: 'broken', path, reason: read.error.reason };
  let json: unknown;
  try {
    json = JSON.parse(read.value.toString('utf8'));
  } catch (e) {
    return { kind: 'broken', path, reason: `not JSON (${(e as Error).message})` };
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
  for (const [i, d] of parsed.data.entries()) {
    const config = decodeConfig(d.Bytes);
    if (config === undefined)
      return { kind: 'broken', path, reason: `delegate ${i}: its config is not base64-encoded JSON` };
    delegates.push({
      name: d.Name ?? config.name,
      config: config.text,
      isList: config.isList,
      // Multus's getIfname: the requested name, the first (master) delegate's CNI_IFNAME, else net<position>.
      ifname: d.ifnameRequest || (i === 0 ? ifname : `net${i}`),
      ...(d.macRequest ? { mac: d.macRequest } : {}),
      ips: d.ipRequest ?? [],
      ...(d.deviceID ? { deviceID: d.deviceID } : {}),
    });
  }
  return { kind: 'delegates', path, delegates };
}

/** The container IDs with a cache in the directory (Multus's `results/` holds libcni's caches, not sandboxes). */
export function listMultusCaches(cacheDir: string): string[] {
  try {
    return readdirSync(cacheDir, { withFileTypes: true })
      .filter((e) => e.isFile() && isFileName(e.name))
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
