/**
 * A private plexusd for a script: temp state and networks directories, its own socket, started as a
 * child process, ready when /readyz answers 200, stopped with SIGTERM by PID.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { dirname, join } from 'node:path';
import type { Teardown } from './teardown';

/** The repository root: the nearest ancestor holding the project's package.json (works from scripts/ and dist/scripts/). */
export function repoRoot(): string {
  for (let dir = __dirname; ; dir = dirname(dir)) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'plexus') return dir;
    if (dirname(dir) === dir) throw new Error(`no plexus package.json above ${__dirname}`);
  }
}

export const shimBinary = (): string => join(repoRoot(), 'bin', 'plexus-cni');
export const daemonEntry = (): string => join(repoRoot(), 'bin', 'plexusd');

/** Writes one NetworkAttachmentDefinition (YAML) into the networks directory. */
export async function writeNetworkDefinition(
  dir: string,
  namespace: string,
  name: string,
  config: Readonly<Record<string, unknown>>,
  annotations: Readonly<Record<string, string>> = {},
): Promise<string> {
  const path = join(dir, `${namespace}-${name}.yaml`);
  const yaml = [
    'apiVersion: k8s.cni.cncf.io/v1',
    'kind: NetworkAttachmentDefinition',
    'metadata:',
    `  name: ${name}`,
    `  namespace: ${namespace}`,
    ...(Object.keys(annotations).length
      ? [
          '  annotations:',
          ...Object.entries(annotations).map(([k, v]) => `    ${JSON.stringify(k)}: ${JSON.stringify(v)}`),
        ]
      : []),
    'spec:',
    // JSON is valid YAML: quoting the config as a JSON string keeps it byte-exact.
    `  config: ${JSON.stringify(JSON.stringify(config))}`,
    '',
  ].join('\n');
  await writeFile(path, yaml);
  return path;
}

export interface DaemonOptions {
  readonly root: string;
  readonly networksDir: string;
  readonly defaultNetwork: string;
  readonly cniBinDir: string;
  readonly logLevel?: 'silent' | 'error' | 'info' | 'debug';
  readonly stateSync?: boolean;
  /** More plexusd flags, e.g. --kubeconfig. */
  readonly extraFlags?: readonly string[];
}

export interface HttpReply {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly body: string;
}

/** One HTTP request over the daemon's unix socket. */
export function httpOverSocket(
  socketPath: string,
  method: string,
  path: string,
  body?: string,
  timeoutMs = 10_000,
): Promise<HttpReply> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        socketPath,
        method,
        path,
        headers: {
          Host: 'plexusd',
          ...(body !== undefined
            ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) }
            : {}),
        },
        timeout: timeoutMs,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no reply within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

export class Plexusd {
  readonly socket: string;
  readonly stateDir: string;
  readonly logFile: string;
  private exited: Promise<number | null>;
  private exitCode: number | null | undefined;

  private constructor(
    private readonly child: ChildProcess,
    readonly options: DaemonOptions,
  ) {
    this.socket = join(options.root, 'plexus.sock');
    this.stateDir = join(options.root, 'state');
    this.logFile = join(options.root, 'plexusd.log');
    this.exited = new Promise((resolve) => child.on('exit', (code) => resolve((this.exitCode = code))));
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  /** Starts plexusd and waits until it is ready; registers its stop with the teardown first. */
  static async start(teardown: Teardown, options: DaemonOptions, readyTimeoutMs = 30_000): Promise<Plexusd> {
    await mkdir(join(options.root, 'state'), { recursive: true });
    const socket = join(options.root, 'plexus.sock');
    const args = [
      daemonEntry(),
      '--socket',
      socket,
      '--state-dir',
      join(options.root, 'state'),
      '--networks-dir',
      options.networksDir,
      '--default-network',
      options.defaultNetwork,
      '--cni-bin-dir',
      options.cniBinDir,
      '--log-level',
      options.logLevel ?? 'error',
      // Not the host's /var/lib/cni/networks: host-local networks share their addresses with this directory.
      '--host-local-data-dir',
      join(options.root, 'cni-networks'),
      ...(options.stateSync !== undefined ? ['--state-sync', String(options.stateSync)] : []),
      ...(options.extraFlags ?? []),
    ];
    const log = createWriteStream(join(options.root, 'plexusd.log'));
    // Exec bin/plexusd itself, so its interpreter flags (see its first line) apply as in production.
    const [entry = '', ...rest] = args;
    const child = spawn(entry, rest, { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout?.pipe(log);
    child.stderr?.pipe(log);
    const daemon = new Plexusd(child, options);
    teardown.add(`stop plexusd (pid ${daemon.pid})`, () => daemon.stop().then(() => undefined));
    const deadline = Date.now() + readyTimeoutMs;
    for (;;) {
      if (daemon.exitCode !== undefined)
        throw new Error(
          `plexusd exited with ${String(daemon.exitCode)} before it was ready:\n${await daemon.logTail()}`,
        );
      const reply = await httpOverSocket(socket, 'GET', '/readyz', undefined, 1000).catch(() => undefined);
      if (reply?.status === 200) return daemon;
      if (Date.now() > deadline)
        throw new Error(`plexusd not ready after ${readyTimeoutMs} ms:\n${await daemon.logTail()}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** SIGTERM by PID, then waits; SIGKILL if it has not exited after the grace period. Returns the exit code. */
  async stop(graceMs = 10_000): Promise<number | null> {
    if (this.exitCode !== undefined) return this.exitCode;
    this.child.kill('SIGTERM');
    const timer = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), graceMs).unref());
    if ((await Promise.race([this.exited, timer])) === 'timeout') {
      this.child.kill('SIGKILL');
      await this.exited;
      throw new Error(`plexusd (pid ${this.pid}) ignored SIGTERM for ${graceMs} ms; killed`);
    }
    return this.exitCode ?? null;
  }

  /** Peak resident set size so far (VmHWM), in KiB. */
  peakRssKiB(): number | undefined {
    try {
      const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${this.pid}/status`, 'utf8'));
      return m?.[1] !== undefined ? Number(m[1]) : undefined;
    } catch {
      return undefined;
    }
  }

  /** Resident set size now (VmRSS), in KiB, and the number of open file descriptors: for the soak. */
  usage(): { rssKiB?: number; fds?: number } {
    try {
      const rss = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${this.pid}/status`, 'utf8'));
      return { ...(rss ? { rssKiB: Number(rss[1]) } : {}), fds: readdirSync(`/proc/${this.pid}/fd`).length };
    } catch {
      return {};
    }
  }

  /** Resets the peak RSS to the current RSS (`5` to /proc/<pid>/clear_refs), so a later reading covers one phase. */
  resetPeakRss(): boolean {
    try {
      writeFileSync(`/proc/${this.pid}/clear_refs`, '5');
      return true;
    } catch {
      return false;
    }
  }

  async logTail(lines = 20): Promise<string> {
    const text = await readFile(this.logFile, 'utf8').catch(() => '');
    return text.trimEnd().split('\n').slice(-lines).join('\n');
  }

  /** What the daemon's state still holds after every pod was deleted: leases and journal records. */
  leftovers(): Promise<string[]> {
    return plexusLeftovers(this.stateDir);
  }
}

/** Lease files (not last_reserved_ip.*) under <state>/ipam/<network>/ and records under <state>/journal/. */
export async function plexusLeftovers(stateDir: string): Promise<string[]> {
  const found: string[] = [];
  const ipamDir = join(stateDir, 'ipam');
  for (const network of await readdir(ipamDir).catch(() => [])) {
    for (const file of await readdir(join(ipamDir, network)).catch(() => [])) {
      if (!file.startsWith('last_reserved_ip.')) found.push(`lease ipam/${network}/${file}`);
    }
  }
  for (const file of await readdir(join(stateDir, 'journal')).catch(() => [])) found.push(`journal/${file}`);
  return found;
}

/** Lease files host-local left in <dataDir>/<network>/ (it keeps last_reserved_ip.* and a lock file). */
export async function hostLocalLeftovers(dataDir: string, network: string): Promise<string[]> {
  const files = await readdir(join(dataDir, network)).catch(() => []);
  return files.filter((f) => !f.startsWith('last_reserved_ip.') && f !== 'lock').map((f) => `lease ${network}/${f}`);
}
