/**
 * The real Multus (v4.3.0, from ../shared/multus or $PLEXUS_MULTUS_BIN: a directory of plain or .xz binaries), for
 * tests of moving a node off it. An .xz binary is decompressed once into a cache under the temp directory.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ROOT } from './daemon';
import { DEBIAN_PLUGINS, referencePluginDir } from './plugin-dir';

const multusDir = (): string => process.env.PLEXUS_MULTUS_BIN ?? resolve(ROOT, '../shared/multus');

/** The path of a Multus binary (multus, multus-shim, multus-daemon); undefined when it is nowhere. */
export function multusBinary(name: 'multus' | 'multus-shim' | 'multus-daemon'): string | undefined {
  const plain = join(multusDir(), name);
  if (existsSync(plain)) return plain;
  const packed = `${plain}.xz`;
  if (!existsSync(packed)) return undefined;
  const st = statSync(packed);
  const cached = join(tmpdir(), 'plexus-multus-bin', `${name}-${st.size}-${Math.floor(st.mtimeMs)}`);
  if (!existsSync(cached)) {
    mkdirSync(join(tmpdir(), 'plexus-multus-bin'), { recursive: true });
    const partial = `${cached}.${process.pid}.partial`;
    writeFileSync(partial, execFileSync('xz', ['-dc', packed], { maxBuffer: 256 << 20 }), { mode: 0o755 });
    renameSync(partial, cached);
  }
  return cached;
}

/**
 * A runtime's CNI plugin directory for a Multus node, made at `binDir`: Debian's reference plugins (Multus's delegates)
 * and the thin `multus` binary. Throws when Multus is nowhere (multusMissing says why).
 */
export function multusPluginDir(binDir: string, referencePlugins = DEBIAN_PLUGINS): void {
  const multus = multusBinary('multus');
  if (multus === undefined) throw new Error(`Multus ${multusMissing() ?? 'is missing'}`);
  referencePluginDir(binDir, referencePlugins);
  copyFileSync(multus, join(binDir, 'multus'));
}

/** Why the Multus tests cannot run here, or undefined. */
export function multusMissing(): string | undefined {
  return multusBinary('multus')
    ? undefined
    : `not available: multus (in $PLEXUS_MULTUS_BIN or ${multusDir()}, plain or .xz)`;
}

/** What the runtime ran: Multus's config, the sandbox and the result Multus printed. */
export interface RuntimeCall {
  readonly config: { readonly name: string };
  readonly containerId: string;
  readonly ifname: string;
  readonly netns: string;
  readonly cniArgs: string;
  readonly result: string;
}

/**
 * The record a runtime's libcni writes once its call to Multus succeeded (`<cacheDir>/results/<network>-<container>-
 * <ifname>`, as libcni's cacheAdd writes it): what names the network a sandbox was made under.
 */
export function writeRuntimeRecord(cacheDir: string, call: RuntimeCall): string {
  const dir = join(cacheDir, 'results');
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${call.config.name}-${call.containerId}-${call.ifname}`);
  const record = {
    kind: 'cniCacheV1',
    containerId: call.containerId,
    config: Buffer.from(JSON.stringify(call.config)).toString('base64'),
    ifName: call.ifname,
    networkName: call.config.name,
    netns: call.netns,
    cniArgs: call.cniArgs.split(';').map((kv) => kv.split('=')),
    result: JSON.parse(call.result) as unknown,
  };
  writeFileSync(path, JSON.stringify(record));
  return path;
}
