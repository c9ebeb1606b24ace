/**
 * A subject of the benchmark: any CNI plugin with its config, plus how to tell what it left behind.
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { type Plugin } from './cni';
import { hostLocalLeftovers } from './plexusd';

export interface Subject {
  readonly name: string;
  /** Short tag for namespace and pod names. */
  readonly tag: string;
  readonly plugin: Plugin;
  /** The host bridge its pods hang off, if any: links still enslaved to it after DEL are leaks. */
  readonly bridge?: string;
  /** Addresses or records its IPAM still holds (call after every pod was deleted). */
  leftovers(): Promise<string[]>;
  /** Waits for work it does after DEL answered (plexusd's background teardown), before leaks are looked for. */
  settled?(): Promise<unknown>;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * `name=/path/to/plugin:/path/to/config.json`: any single-plugin network config (not a conflist).
 * CNI_PATH is the plugin's directory, so its IPAM plugin is found next to it.
 */
export function parseSubjectSpec(spec: string, tag: string): Subject {
  const eq = spec.indexOf('=');
  const colon = spec.indexOf(':', eq + 1);
  if (eq <= 0 || colon < 0) throw new Error(`--subject ${spec}: expected name=/path/to/plugin:/path/to/config.json`);
  const name = spec.slice(0, eq);
  const binary = resolve(spec.slice(eq + 1, colon));
  const configPath = resolve(spec.slice(colon + 1));
  const config = JSON.parse(readFileSync(configPath, 'utf8')) as unknown;
  if (!isRecord(config)) throw new Error(`--subject ${name}: ${configPath} is not a JSON object`);
  if (Array.isArray(config['plugins']))
    throw new Error(`--subject ${name}: ${configPath} is a conflist; give a single plugin config`);
  return describeSubject(name, tag, { binary, config, env: { CNI_PATH: dirname(binary) } });
}

/** Infers the leak checks from a reference-style config: `bridge` for type bridge, host-local's data dir. */
export function describeSubject(name: string, tag: string, plugin: Plugin): Subject {
  const { config } = plugin;
  const bridge =
    config['type'] === 'bridge' ? (typeof config['bridge'] === 'string' ? config['bridge'] : 'cni0') : undefined;
  const ipam = isRecord(config['ipam']) ? config['ipam'] : undefined;
  const network = typeof config['name'] === 'string' ? config['name'] : '';
  const dataDir =
    ipam?.['type'] === 'host-local'
      ? typeof ipam['dataDir'] === 'string'
        ? ipam['dataDir']
        : '/var/lib/cni/networks'
      : undefined;
  return {
    name,
    tag,
    plugin,
    ...(bridge !== undefined ? { bridge } : {}),
    leftovers: () =>
      dataDir !== undefined && isAbsolute(dataDir) && network
        ? hostLocalLeftovers(dataDir, network)
        : Promise.resolve([]),
  };
}
