/**
 * Which Kubernetes a test run uses, and where its binaries are: the one place tests, fixtures and benchmarks ask.
 * $PLEXUS_K8S_BIN (a directory of plain or .xz binaries) wins; else $PLEXUS_K8S_VERSION, else the pair $PLEXUS_STACK
 * picks (stack.ts), names ../shared/k8s/v<version>/bin: 1.36 (v1.36.3) by default, 1.35 (v1.35.6) for the older
 * pair's pass. Such a directory may be a real one, a symlink, or a small file holding a relative path (a symlink
 * flattened by a copy). .xz binaries are decompressed once into a cache under the temp directory.
 */
import { execFileSync } from 'node:child_process';
import {
  accessSync,
  constants,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { ROOT } from './daemon';
import { chosenStack, DEFAULT_STACK, TESTED_STACKS } from './stack';

export const DEFAULT_K8S_VERSION = DEFAULT_STACK.k8sMinor;
/** The versions ../shared/k8s holds (docs/install.md, "Tested Kubernetes versions"). */
export const TESTED_K8S_VERSIONS = TESTED_STACKS.map((s) => s.k8sMinor);
const SHARED_K8S = resolve(ROOT, '../shared/k8s');
/** A directory stand-in (a flattened symlink) is a one-line file far smaller than this. */
const MAX_LINK_FILE_BYTES = 4096;
const MAX_LINK_HOPS = 4;

export interface K8sBinDir {
  /** The directory, resolved; undefined when there is none. */
  readonly dir: string | undefined;
  /** Where it came from, for messages: "$PLEXUS_K8S_BIN=/x" or "../shared/k8s/v1.35/bin (PLEXUS_K8S_VERSION=1.35)". */
  readonly source: string;
  /** Why there is no directory. */
  readonly problem?: string;
}

const onPath = (name: string): string | undefined =>
  (process.env.PATH ?? '')
    .split(delimiter)
    .map((d) => join(d, name))
    .find((p) => existsSync(p));

/** A directory, a symlink to one, or a small file whose content is a path (relative to the file's directory). */
export function resolveDirectory(path: string, hops = 0): string | undefined {
  let st;
  try {
    st = statSync(path);
  } catch {
    return undefined;
  }
  if (st.isDirectory()) return path;
  if (!st.isFile() || st.size > MAX_LINK_FILE_BYTES || hops >= MAX_LINK_HOPS) return undefined;
  const target = readFileSync(path, 'utf8').trim();
  if (!target || target.includes('\n') || target.includes('\0')) return undefined;
  return resolveDirectory(resolve(dirname(path), target), hops + 1);
}

/** The version this run asks for ($PLEXUS_K8S_VERSION, else $PLEXUS_STACK's, default 1.36), as "<major>.<minor>". */
export function requestedK8sVersion(env: NodeJS.ProcessEnv = process.env): string {
  return env.PLEXUS_K8S_VERSION?.trim().replace(/^v/, '') || (chosenStack(env).stack ?? DEFAULT_STACK).k8sMinor;
}

/** The directory this run takes Kubernetes binaries from. */
export function k8sBinDir(env: NodeJS.ProcessEnv = process.env): K8sBinDir {
  const explicit = env.PLEXUS_K8S_BIN;
  if (explicit) {
    const dir = resolveDirectory(explicit);
    const source = `$PLEXUS_K8S_BIN=${explicit}`;
    return dir ? { dir, source } : { dir, source, problem: `${source} is not a directory` };
  }
  const pinned = env.PLEXUS_K8S_VERSION?.trim();
  const choice = chosenStack(env);
  if (!pinned && !choice.stack) return { dir: undefined, source: `PLEXUS_STACK`, problem: choice.problem };
  const version = requestedK8sVersion(env);
  if (!/^\d+\.\d+$/.test(version)) {
    const problem = `PLEXUS_K8S_VERSION=${version} is not a minor version (${TESTED_K8S_VERSIONS.join(', ')})`;
    return { dir: undefined, source: `PLEXUS_K8S_VERSION=${version}`, problem };
  }
  const wanted = join(SHARED_K8S, `v${version}`, 'bin');
  const why = pinned ? `PLEXUS_K8S_VERSION=${version}` : `PLEXUS_STACK=${choice.stack?.name}`;
  const source = `../shared/k8s/v${version}/bin (${why})`;
  const dir = resolveDirectory(wanted);
  if (dir) return { dir, source };
  return { dir, source, problem: `${wanted} is missing (versions tested: ${TESTED_K8S_VERSIONS.join(', ')})` };
}

/** The path of a binary in a directory, decompressed into the cache if it ships as .xz; undefined when absent. */
function binaryIn(dir: string, name: string): string | undefined {
  const plain = join(dir, name);
  try {
    accessSync(plain, constants.X_OK);
    if (statSync(plain).isFile()) return plain;
  } catch {
    /* not there as a plain binary */
  }
  const packed = `${plain}.xz`;
  if (!existsSync(packed) || !onPath('xz')) return undefined;
  const st = statSync(packed);
  const cacheDir = join(tmpdir(), 'plexus-k8s-bin');
  const cached = join(cacheDir, `${name}-${st.size}-${Math.floor(st.mtimeMs)}`);
  if (!existsSync(cached)) {
    mkdirSync(cacheDir, { recursive: true });
    const partial = `${cached}.${process.pid}.partial`;
    writeFileSync(partial, execFileSync('xz', ['-dc', packed], { maxBuffer: 512 << 20 }), { mode: 0o755 });
    renameSync(partial, cached); // whole or absent, even with two test runs at once
  }
  return cached;
}

/** The path of a Kubernetes binary of this run (kube-apiserver, kubelet, ...); undefined when it is nowhere. */
export function k8sBinary(name: string): string | undefined {
  const { dir } = k8sBinDir();
  return dir ? binaryIn(dir, name) : undefined;
}

/** Why a Kubernetes binary of this run is not available, naming where it was looked for; undefined when it is. */
export function k8sBinaryMissing(name: string): string | undefined {
  const where = k8sBinDir();
  if (!where.dir)
    return `not available: ${name} (${where.problem}; set PLEXUS_STACK, PLEXUS_K8S_BIN or PLEXUS_K8S_VERSION)`;
  if (k8sBinary(name)) return undefined;
  const xz = existsSync(join(where.dir, `${name}.xz`)) && !onPath('xz') ? ', and xz is not installed' : '';
  return `not available: ${name} (not in ${where.source}, plain or .xz${xz})`;
}

/**
 * kubectl for a test that needs one: this run's directory's, else the default pair's in ../shared/k8s (Debian's
 * kubernetes-client is far outside the supported skew).
 */
export function kubectlBinary(): string | undefined {
  const newest = resolveDirectory(join(SHARED_K8S, `v${DEFAULT_K8S_VERSION}`, 'bin'));
  return k8sBinary('kubectl') ?? (newest ? binaryIn(newest, 'kubectl') : undefined);
}

export interface K8sVersion {
  readonly major: number;
  readonly minor: number;
  readonly patch: number;
  /** As the binaries print it: "v1.35.6". */
  readonly text: string;
}

/** The version of this run's Kubernetes, as its kube-apiserver reports it; undefined when there is none. */
export function k8sVersion(): K8sVersion | undefined {
  const bin = k8sBinary('kube-apiserver') ?? k8sBinary('kubelet');
  if (!bin) return undefined;
  const printed = execFileSync(bin, ['--version'], { encoding: 'utf8' });
  const m = /v(\d+)\.(\d+)\.(\d+)/.exec(printed);
  if (!m) throw new Error(`${bin} --version printed no version: ${printed.slice(0, 200)}`);
  return { major: Number(m[1]), minor: Number(m[2]), patch: Number(m[3]), text: m[0] };
}

/**
 * Why a test that needs at least `minimum` ("1.34") cannot run on this run's Kubernetes, or undefined when it can
 * (or when there is no Kubernetes at all: the suite's own prerequisite check says that). A reason for an optional
 * skip: the older-version pass runs what it can.
 */
export function k8sOlderThan(minimum: string, version: K8sVersion | undefined = k8sVersion()): string | undefined {
  const [major = 0, minor = 0] = minimum.split('.').map(Number);
  if (!version || version.major > major || (version.major === major && version.minor >= minor)) return undefined;
  const hint = `the default PLEXUS_STACK=${DEFAULT_STACK.name} has it`;
  return `needs Kubernetes >= ${minimum} (this run: ${version.text}; ${hint})`;
}
