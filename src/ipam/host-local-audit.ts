/**
 * Whether what the reference host-local holds can be read in full: before plexusd takes a node over from Multus, the
 * directory of each host-local network (host-local-dir.ts) must be one native host-local can hold addresses from.
 * An absent directory holds nothing. Anything else host-local never writes there under an address's name (a name not
 * in the form host-local gives it, a directory, a FIFO, a file that is not `<containerID>[\r\n<ifname>]`) means the
 * store is not what it seems: it is named, and the takeover waits.
 */
import { lstatSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { readBoundedFileSync } from '../common/bounded-file';
import { formatIp, parseIp } from '../common/ip';
import type { IpamConfig } from './config';
import { hostLocalDirOf } from './host-local-dir';

const LEASE_READ = { maxBytes: 4096 } as const;
/** host-local's text: the container ID, then (since v0.7) `\r\n` and the interface name. */
const HOST_LOCAL_LEASE = /^[^\r\n]+(\r\n[^\r\n]+)?$/;
/** Problems named per directory; the rest are counted. */
const NAMED = 3;

const errnoOf = (thrown: unknown): string => (thrown as NodeJS.ErrnoException | null)?.code ?? String(thrown);

/** What is wrong with one entry of the directory, or undefined. */
function entryProblem(path: string, name: string): string | undefined {
  if (name === 'lock' || /^last_reserved_ip\.\d+$/.test(name)) return undefined;
  const ip = parseIp(name);
  if (ip === undefined) return undefined; // host-local looks only at addresses' names
  const file = join(path, name);
  if (formatIp(ip.family, ip.value) !== name) return `${file} is not named as host-local names an address`;
  const read = readBoundedFileSync(file, LEASE_READ);
  if (!read.ok) return `${file} ${read.error.reason}`;
  const text = read.value.toString('utf8').trim();
  return HOST_LOCAL_LEASE.test(text) ? undefined : `${file} is not a host-local lease (<containerID>\\r\\n<ifname>)`;
}

/** Why the directory's leases cannot all be read; empty when they can (or there is no directory). */
export function hostLocalDirProblems(path: string): string[] {
  try {
    lstatSync(path);
  } catch (thrown) {
    if (errnoOf(thrown) === 'ENOENT') return [];
    return [`${path} cannot be read (${errnoOf(thrown)})`];
  }
  let names: string[];
  try {
    if (!statSync(path).isDirectory()) return [`${path} is not a directory`];
    names = readdirSync(path);
  } catch (thrown) {
    return [`${path} cannot be read (${errnoOf(thrown)})`];
  }
  const problems = names.sort().flatMap((name) => entryProblem(path, name) ?? []);
  if (problems.length <= NAMED) return problems;
  return [...problems.slice(0, NAMED), `and ${problems.length - NAMED} more in ${path}`];
}

/**
 * The problems of every host-local network's directory (`dataDir` of its config, else `defaultDataDir`), each
 * directory once.
 */
export function hostLocalStoreProblems(
  networks: readonly { readonly network: string; readonly config: IpamConfig }[],
  defaultDataDir: string,
): string[] {
  const dirs = new Set(
    networks.flatMap(({ network, config }) =>
      config.type === 'host-local' ? [hostLocalDirOf(config.dataDir ?? defaultDataDir, network)] : [],
    ),
  );
  return [...dirs].sort().flatMap(hostLocalDirProblems);
}
