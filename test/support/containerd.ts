/**
 * A private containerd for tests: its own root, state and socket under a temporary directory, the CRI plugin off,
 * started and stopped by PID. Binaries come from $PLEXUS_CONTAINERD (`2`: containerd 2.1 of ../shared/containerd,
 * decompressed once into a cache; or a directory holding containerd, ctr and containerd-shim-runc-v2, plain or .xz),
 * else $PLEXUS_CONTAINERD_BIN (a directory holding containerd and ctr) or the PATH (Debian's 1.6); suites pass `containerdMissing()`'s reason to prerequisites.ts (a skip, or in CI a failure) when they
 * are absent. Also builds a tiny pause image (a static C program) as an OCI archive, since no registry is reachable.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmdirSync, rmSync } from 'node:fs';
import { statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { ROOT } from './daemon';
import { stopProcess } from './processes';

const RUNTIME_BINARIES = ['containerd', 'ctr', 'containerd-shim-runc-v2'];

/**
 * The directory of $PLEXUS_CONTAINERD's binaries (or of `chosen`, in the same form) (decompressed from .xz into a cache under the temp directory when
 * they ship so), undefined when it is unset; a value that names no such directory is an error that says so.
 */
export function containerdBinDir(chosen = process.env.PLEXUS_CONTAINERD?.trim()): string | undefined {
  if (!chosen) return undefined;
  const dir = chosen === '2' ? resolve(ROOT, '../shared/containerd') : chosen;
  if (RUNTIME_BINARIES.every((b) => existsSync(join(dir, b)))) return dir;
  if (!RUNTIME_BINARIES.every((b) => existsSync(join(dir, `${b}.xz`))))
    throw new Error(`PLEXUS_CONTAINERD=${chosen}: ${dir} holds no ${RUNTIME_BINARIES.join(', ')} (plain or .xz)`);
  const st = statSync(join(dir, 'containerd.xz'));
  const cache = join(tmpdir(), 'plexus-containerd-bin', `${st.size}-${Math.floor(st.mtimeMs)}`);
  if (!existsSync(join(cache, 'done'))) {
    const partial = `${cache}.${process.pid}.partial`;
    mkdirSync(partial, { recursive: true });
    for (const b of RUNTIME_BINARIES)
      writeFileSync(join(partial, b), execFileSync('xz', ['-dc', join(dir, `${b}.xz`)], { maxBuffer: 512 << 20 }), {
        mode: 0o755,
      });
    writeFileSync(join(partial, 'done'), '');
    try {
      renameSync(partial, cache); // whole or absent, even with two test runs at once
    } catch {
      rmSync(partial, { recursive: true, force: true }); // another run made it first
    }
  }
  return cache;
}

const which = (name: string): string | undefined => {
  const chosen = RUNTIME_BINARIES.includes(name) ? containerdBinDir() : undefined;
  if (chosen) return join(chosen, name);
  const dirs = process.env.PLEXUS_CONTAINERD_BIN
    ? [process.env.PLEXUS_CONTAINERD_BIN]
    : (process.env.PATH ?? '').split(delimiter);
  return [...dirs, '/usr/sbin', '/sbin'].map((d) => join(d, name)).find((p) => existsSync(p));
};

/** Why the containerd tests cannot run here, or undefined when they can. */
export function containerdMissing(): string | undefined {
  const missing = ['containerd', 'ctr', 'runc', 'musl-gcc', 'nsenter'].filter((b) => !which(b));
  if (missing.length)
    return `not installed: ${missing.join(', ')} (bash scripts/setup.sh installs Debian's containerd, runc and musl-tools; or set PLEXUS_CONTAINERD_BIN)`;
  return undefined;
}

export function containerdVersion(): string {
  return execFileSync(which('containerd')!, ['--version'], { encoding: 'utf8' }).trim();
}

/** The path of this run's containerd, ctr or shim (see the top of this file); undefined when there is none. */
export const containerdBinary = (name: 'containerd' | 'ctr' | 'containerd-shim-runc-v2'): string | undefined =>
  which(name);

/** The major version of this run's containerd (1 for Debian bookworm's 1.6, 2 for ../shared/containerd). */
export function containerdMajor(): number {
  const m = / v?(\d+)\.\d+\.\d+/.exec(containerdVersion());
  return Number(m?.[1] ?? 1);
}

export class ContainerdFixture {
  readonly socket: string;
  readonly namespace = 'plexus-test';
  private proc: ChildProcess | undefined;
  log = '';

  /** Host directories containerd and ctr make on the way that did not exist before: removed at stop if empty. */
  private readonly madeOnHost: string[] = [];

  private constructor(readonly dir: string) {
    this.socket = join(dir, 'run', 'containerd.sock');
  }

  static async start(): Promise<ContainerdFixture> {
    const fx = new ContainerdFixture(mkdtempSync(join(tmpdir(), 'plexus-containerd-')));
    // Paths containerd 1.6 and ctr hard-code: the shims' sockets, runc's state, ctr's fifos.
    for (const path of ['/run/containerd/s', `/run/containerd/runc/${fx.namespace}`, '/run/containerd/fifo']) {
      for (let d = path; d !== '/' && !existsSync(d); d = dirname(d)) fx.madeOnHost.push(d);
    }
    const config = join(fx.dir, 'containerd.toml');
    mkdirSync(join(fx.dir, 'run'), { recursive: true });
    writeFileSync(
      config,
      [
        'version = 2',
        `root = "${join(fx.dir, 'root')}"`,
        `state = "${join(fx.dir, 'state')}"`,
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
        '[grpc]',
        `  address = "${fx.socket}"`,
        '[ttrpc]',
        `  address = "${join(fx.dir, 'run', 'containerd.sock.ttrpc')}"`,
        // Its default is /opt/containerd, created at start.
        '[plugins."io.containerd.internal.v1.opt"]',
        `  path = "${join(fx.dir, 'opt')}"`,
        '',
      ].join('\n'),
    );
    const proc = spawn(which('containerd')!, ['--config', config], { stdio: ['ignore', 'ignore', 'pipe'] });
    fx.proc = proc;
    proc.stderr?.on('data', (c: Buffer) => (fx.log += c.toString()));
    const deadline = Date.now() + 20000;
    while (fx.ctr(['version']).status !== 0) {
      if (proc.exitCode !== null || Date.now() > deadline) {
        await fx.stop();
        throw new Error(`containerd did not start: ${fx.log.slice(-2000)}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    return fx;
  }

  ctr(args: readonly string[], timeoutMs = 60000): { status: number | null; out: string } {
    const r = spawnSync(which('ctr')!, ['--address', this.socket, '--namespace', this.namespace, ...args], {
      encoding: 'utf8',
      timeout: timeoutMs,
    });
    return { status: r.status, out: `${r.stdout}${r.stderr}` };
  }

  /** `ctr run` in the background (it stays until the container exits, then tears its network down). */
  ctrRun(args: readonly string[]): {
    readonly proc: ChildProcess;
    readonly done: Promise<{ code: number | null; out: string }>;
  } {
    const proc = spawn(which('ctr')!, ['--address', this.socket, '--namespace', this.namespace, 'run', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    proc.stdout?.on('data', (c: Buffer) => (out += c.toString()));
    proc.stderr?.on('data', (c: Buffer) => (out += c.toString()));
    return { proc, done: new Promise((r) => proc.on('close', (code) => r({ code, out }))) };
  }

  /** The PID of a container's running task, once it runs. */
  async taskPid(id: string, timeoutMs = 20000): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const line = this.ctr(['tasks', 'ls'])
        .out.split('\n')
        .find((l) => l.split(/\s+/)[0] === id);
      const [, pid, status] = line?.split(/\s+/) ?? [];
      if (status === 'RUNNING' && Number(pid) > 0) return Number(pid);
      if (Date.now() > deadline)
        throw new Error(`task ${id} not running after ${timeoutMs} ms: ${this.ctr(['tasks', 'ls']).out}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Imports the pause image built by buildPauseImage (name local.test/pause:1). */
  importPause(): string {
    const archive = buildPauseImage(join(this.dir, 'image'));
    const r = this.ctr(['images', 'import', archive]);
    if (r.status !== 0) throw new Error(`ctr images import: ${r.out}`);
    return 'local.test/pause:1';
  }

  /** Removes every container and task of the test namespace, stops containerd by its PID, and deletes its directory. */
  async stop(): Promise<void> {
    const p = this.proc;
    if (p && p.exitCode === null && p.signalCode === null) {
      for (const id of this.ctr(['containers', 'ls', '-q']).out.split('\n').filter(Boolean)) {
        this.ctr(['tasks', 'kill', '-s', 'SIGKILL', id]);
        this.ctr(['tasks', 'delete', '-f', id]);
        this.ctr(['containers', 'delete', id]);
      }
      await stopProcess(p);
    }
    // Snapshot mounts left behind (a crash mid-test) must go before the directory can.
    const mounts = readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .map((l) => l.split(' ')[1] ?? '')
      .filter((m) => m.startsWith(this.dir))
      .reverse();
    for (const m of mounts) spawnSync('umount', ['-l', m]);
    rmSync(this.dir, { recursive: true, force: true });
    // Deepest first; one that is not empty (another containerd uses it) stays.
    for (const d of [...new Set(this.madeOnHost)].sort((a, b) => b.length - a.length)) {
      try {
        rmdirSync(d);
      } catch {
        /* not empty, or gone */
      }
    }
  }
}

const PAUSE_C =
  '#include <signal.h>\n#include <unistd.h>\nstatic void t(int s){(void)s;_exit(0);}\nint main(void){signal(SIGINT,t);signal(SIGTERM,t);for(;;)pause();}\n';

/** A one-binary image (a static pause) as an OCI image-layout tar; returns the archive's path. */
export function buildPauseImage(dir: string): string {
  const rootfs = join(dir, 'rootfs');
  const layout = join(dir, 'layout');
  mkdirSync(join(rootfs, 'bin'), { recursive: true, mode: 0o755 });
  mkdirSync(join(layout, 'blobs', 'sha256'), { recursive: true });
  for (const d of ['proc', 'sys', 'dev', 'tmp', 'etc']) mkdirSync(join(rootfs, d), { mode: 0o755 });
  writeFileSync(join(dir, 'pause.c'), PAUSE_C);
  execFileSync(which('musl-gcc')!, ['-static', '-Os', '-s', '-o', join(rootfs, 'bin', 'pause'), join(dir, 'pause.c')]);
  const layer = execFileSync(
    'tar',
    ['--sort=name', '--owner=0', '--group=0', '--numeric-owner', '--mtime=@0', '-C', rootfs, '-cf', '-', '.'],
    { maxBuffer: 64 << 20 },
  );
  const blob = (bytes: Buffer | string): { digest: string; size: number } => {
    const buf = Buffer.from(bytes);
    const hex = createHash('sha256').update(buf).digest('hex');
    writeFileSync(join(layout, 'blobs', 'sha256', hex), buf);
    return { digest: `sha256:${hex}`, size: buf.length };
  };
  const l = blob(layer);
  const c = blob(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: { Env: ['PATH=/bin'], Cmd: ['/bin/pause'] },
      rootfs: { type: 'layers', diff_ids: [l.digest] },
    }),
  );
  const m = blob(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...c },
      layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar', ...l }],
    }),
  );
  writeFileSync(join(layout, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}');
  writeFileSync(
    join(layout, 'index.json'),
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.index.v1+json',
      manifests: [
        {
          mediaType: 'application/vnd.oci.image.manifest.v1+json',
          ...m,
          platform: { architecture: 'amd64', os: 'linux' },
          annotations: { 'io.containerd.image.name': 'local.test/pause:1', 'org.opencontainers.image.ref.name': '1' },
        },
      ],
    }),
  );
  const archive = join(dir, 'pause.tar');
  execFileSync('tar', ['-C', layout, '-cf', archive, '.']);
  return archive;
}

/**
 * Files a test puts on host paths a runtime reads (/opt/cni/bin, /etc/cni/net.d): each is recorded with what was there
 * before (content, or absence, and the directories created for it) and put back by `restore()`.
 */
export class HostFiles {
  private readonly saved: { path: string; before: Buffer | undefined }[] = [];
  private readonly createdDirs: string[] = [];

  write(path: string, content: Buffer | string, mode = 0o644): void {
    const dir = path.slice(0, path.lastIndexOf('/'));
    const missing: string[] = [];
    for (let d = dir; d && !existsSync(d); d = d.slice(0, d.lastIndexOf('/'))) missing.unshift(d);
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    this.createdDirs.push(...missing.reverse());
    this.saved.push({ path, before: existsSync(path) ? readFileSync(path) : undefined });
    writeFileSync(path, content, { mode });
  }

  restore(): void {
    for (const { path, before } of this.saved.splice(0).reverse()) {
      if (before === undefined) rmSync(path, { force: true });
      else writeFileSync(path, before);
    }
    for (const d of this.createdDirs.splice(0)) spawnSync('rmdir', [d]);
  }
}
