/**
 * Builds Plexus's container image from what is on this machine, without a registry or a container builder: the Node
 * runtime running this script (process.execPath) and the shared libraries it and koffi load, busybox (a shell and
 * the usual tools, so the image stays debuggable), the built daemon, CLI and installer (dist/src), the production
 * npm packages, and the static shim. The result is an OCI image-layout tar that `ctr -n k8s.io images import`
 * accepts, in two layers: the runtime (changes with Node) and Plexus (changes with every build).
 *
 *   node dist/scripts/build-image.js [--name local.test/plexus:0.1.0] [--out DIR]   prints the archive's path last
 *   node dist/scripts/build-image.js --rootfs DIR                                    only assembles the file tree
 *                                                                                    (the Dockerfile's build stage)
 *
 * Run through `bash scripts/image.sh`, which builds first.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';

const ROOT = resolve(__dirname, '../..');
const APP = '/opt/plexus';
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };

/** What the image runs with; the Dockerfile repeats it. */
export const IMAGE_CONFIG = {
  Env: [
    'PATH=/usr/local/bin:/usr/bin:/bin',
    // A small young generation keeps the daemon's peak RSS low (bin/plexusd's shebang says the same).
    'NODE_OPTIONS=--max-semi-space-size=1',
  ],
  Entrypoint: ['/usr/local/bin/plexusd'],
  Cmd: [] as string[],
  WorkingDir: '/',
  Labels: {
    'org.opencontainers.image.title': 'plexus',
    'org.opencontainers.image.version': process.env.PLEXUS_IMAGE_VERSION ?? PKG.version,
  },
};

const run = (cmd: string, args: readonly string[]): string =>
  execFileSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20 });

function which(name: string): string | undefined {
  return (process.env.PATH ?? '')
    .split(':')
    .concat(['/usr/bin', '/bin'])
    .map((d) => join(d, name))
    .find((p) => existsSync(p));
}

/** The libraries a dynamically linked file loads, as the paths the loader names them by. */
function sharedLibraries(file: string): string[] {
  const out = run('ldd', [file]);
  const libs: string[] = [];
  for (const line of out.split('\n')) {
    const m = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)\s+\(/.exec(line);
    if (m?.[1]) libs.push(m[1]);
  }
  return libs;
}

/** Copies a host file into the rootfs at the same path, resolving merged-/usr symlinked directories (/lib -> usr/lib). */
function copyHostFile(rootfs: string, hostPath: string, mode?: number): void {
  const dir = realpathSync(dirname(hostPath));
  const target = join(rootfs, dir, basename(hostPath));
  mkdirSync(dirname(target), { recursive: true, mode: 0o755 });
  copyFileSync(realpathSync(hostPath), target);
  chmodSync(target, mode ?? statSync(realpathSync(hostPath)).mode & 0o777);
}

function runtimeLayer(rootfs: string): void {
  for (const d of [
    'usr/bin',
    'usr/lib',
    'usr/lib64',
    'usr/sbin',
    'usr/local/bin',
    'etc',
    'proc',
    'sys',
    'dev',
    'run',
    'var/lib',
    'root',
  ])
    mkdirSync(join(rootfs, d), { recursive: true, mode: 0o755 });
  // The host's merged /usr layout, so that the loader's built-in paths (/lib64/ld-linux-x86-64.so.2) resolve.
  for (const link of ['bin', 'lib', 'lib64', 'sbin']) symlinkSync(`usr/${link}`, join(rootfs, link));
  mkdirSync(join(rootfs, 'tmp'), { mode: 0o1777 });
  chmodSync(join(rootfs, 'tmp'), 0o1777);
  mkdirSync(join(rootfs, 'var/run'), { recursive: true });
  writeFileSync(
    join(rootfs, 'etc/passwd'),
    'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n',
  );
  writeFileSync(join(rootfs, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n');
  writeFileSync(join(rootfs, 'etc/nsswitch.conf'), 'passwd: files\ngroup: files\nhosts: files dns\n');

  // Wherever this Node lives on the host (/usr/bin, /usr/local/bin, nvm), it is /usr/bin/node in the image.
  const node = realpathSync(process.execPath);
  copyFileSync(node, join(rootfs, 'usr/bin/node'));
  chmodSync(join(rootfs, 'usr/bin/node'), 0o755);
  // What node and koffi's native module load; libc among them, which koffi also dlopens by soname for the kernel calls.
  for (const lib of new Set([...sharedLibraries(node), ...sharedLibraries(findKoffiNative())]))
    copyHostFile(rootfs, lib);

  // busybox: a shell, ip, ls, cat, ps, nsenter... for `kubectl exec` when something goes wrong (about 2 MB).
  const busybox = which('busybox');
  if (busybox) {
    copyFileSync(realpathSync(busybox), join(rootfs, 'usr/bin/busybox'));
    chmodSync(join(rootfs, 'usr/bin/busybox'), 0o755);
    for (const applet of run(busybox, ['--list']).split('\n').filter(Boolean)) {
      const link = join(rootfs, 'usr/bin', applet);
      if (!existsSync(link)) symlinkSync('busybox', link);
    }
  } else
    process.stderr.write('image: busybox not found (apt-get install busybox-static): the image will have no shell\n');
}

function findKoffiNative(): string {
  const dir = join(ROOT, 'node_modules/@koromix/koffi-linux-x64/linux_x64');
  const file = readdirSync(dir).find((f) => f.endsWith('.node'));
  if (!file) throw new Error(`no koffi native module in ${dir}`);
  return join(dir, file);
}

/** The production packages (npm ls --omit=dev), without docs, type declarations, sources and other platforms' builds. */
function productionPackages(): string[] {
  const out = run('npm', ['ls', '--omit=dev', '--all', '--parseable', '--prefix', ROOT]);
  return out
    .split('\n')
    .filter((p) => p && resolve(p) !== ROOT)
    .map((p) => relative(ROOT, p));
}

// Nothing a running daemon loads: docs, tests (not `doc`: yaml's code lives there), TypeScript sources and declarations, C++ sources and headers (koffi
// ships its build inputs), and koffi's musl build.
const DROP =
  /(\.md|\.ts|\.cts|\.mts|\.map|\.cc|\.h|\.hh|\.cpp|CMakeLists\.txt)$|^(docs|test|tests|benchmarks?|vendor|musl_x64|\.github)$/i;

function appLayer(rootfs: string): void {
  const app = join(rootfs, APP);
  mkdirSync(join(rootfs, 'usr/local/bin'), { recursive: true, mode: 0o755 });
  mkdirSync(app, { recursive: true, mode: 0o755 });
  writeFileSync(join(app, 'package.json'), readFileSync(join(ROOT, 'package.json')));
  cpSync(join(ROOT, 'dist/src'), join(app, 'dist/src'), { recursive: true, filter: (src) => !src.endsWith('.map') });
  for (const pkg of productionPackages()) {
    cpSync(join(ROOT, pkg), join(app, pkg), {
      recursive: true,
      filter: (src) => src === join(ROOT, pkg) || !DROP.test(basename(src)),
    });
  }
  mkdirSync(join(app, 'bin'), { mode: 0o755 });
  for (const bin of ['plexusd', 'plexusctl', 'plexus-install', 'plexus-cni']) {
    copyFileSync(join(ROOT, 'bin', bin), join(app, 'bin', bin));
    chmodSync(join(app, 'bin', bin), 0o755);
  }
  // The bin scripts' `#!/usr/bin/env -S node ...` needs GNU env: the image runs them with node directly
  // (the semi-space flag comes from NODE_OPTIONS). plexus-cni is the static shim the installer copies to the host.
  for (const bin of ['plexusd', 'plexusctl', 'plexus-install']) {
    writeFileSync(join(rootfs, 'usr/local/bin', bin), `#!/usr/bin/node\nrequire('${APP}/bin/${bin}');\n`, {
      mode: 0o755,
    });
  }
  symlinkSync(`${APP}/bin/plexus-cni`, join(rootfs, 'usr/local/bin/plexus-cni'));
}

function tarLayer(dir: string): Buffer {
  return execFileSync(
    'tar',
    ['--sort=name', '--owner=0', '--group=0', '--numeric-owner', '--mtime=@0', '-C', dir, '-cf', '-', '.'],
    { maxBuffer: 1 << 30 },
  );
}

export interface BuiltImage {
  readonly archive: string;
  readonly name: string;
  readonly archiveBytes: number;
  readonly uncompressedBytes: number;
}

export function buildImage(name: string, outDir: string): BuiltImage {
  const work = mkdtempSync(join(tmpdir(), 'plexus-image-'));
  try {
    const base = join(work, 'base');
    const app = join(work, 'app');
    mkdirSync(base, { mode: 0o755 });
    mkdirSync(app, { mode: 0o755 });
    chmodSync(base, 0o755);
    chmodSync(app, 0o755);
    runtimeLayer(base);
    appLayer(app);
    const layout = join(work, 'layout');
    mkdirSync(join(layout, 'blobs/sha256'), { recursive: true });
    const blob = (bytes: Buffer | string): { digest: string; size: number } => {
      const buf = Buffer.from(bytes);
      const hex = createHash('sha256').update(buf).digest('hex');
      writeFileSync(join(layout, 'blobs/sha256', hex), buf);
      return { digest: `sha256:${hex}`, size: buf.length };
    };
    let uncompressed = 0;
    const layers = [base, app].map((dir) => {
      const tar = tarLayer(dir);
      uncompressed += tar.length;
      const diffId = `sha256:${createHash('sha256').update(tar).digest('hex')}`;
      return { diffId, ...blob(gzipSync(tar, { level: 9 })) };
    });
    const config = blob(
      JSON.stringify({
        architecture: 'amd64',
        os: 'linux',
        created: '1970-01-01T00:00:00Z',
        config: IMAGE_CONFIG,
        rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffId) },
      }),
    );
    const manifest = blob(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
        layers: layers.map((l) => ({
          mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
          digest: l.digest,
          size: l.size,
        })),
      }),
    );
    const tag = name.slice(name.lastIndexOf(':') + 1);
    writeFileSync(join(layout, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}');
    writeFileSync(
      join(layout, 'index.json'),
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.index.v1+json',
        manifests: [
          {
            mediaType: 'application/vnd.oci.image.manifest.v1+json',
            ...manifest,
            platform: { architecture: 'amd64', os: 'linux' },
            annotations: { 'io.containerd.image.name': name, 'org.opencontainers.image.ref.name': tag },
          },
        ],
      }),
    );
    mkdirSync(outDir, { recursive: true });
    const archive = join(outDir, `plexus-image-${tag}.tar`);
    execFileSync('tar', [
      '--sort=name',
      '--owner=0',
      '--group=0',
      '--numeric-owner',
      '--mtime=@0',
      '-C',
      layout,
      '-cf',
      archive,
      '.',
    ]);
    return { archive, name, archiveBytes: statSync(archive).size, uncompressedBytes: uncompressed };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Both layers into one directory: what the Dockerfile copies into a `FROM scratch` stage. */
export function buildRootfs(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  if (readdirSync(dir).length) throw new Error(`${dir} is not empty`);
  runtimeLayer(dir);
  appLayer(dir);
}

function main(): number {
  const { values } = parseArgs({
    options: { name: { type: 'string' }, out: { type: 'string' }, rootfs: { type: 'string' } },
  });
  if (values.rootfs) {
    buildRootfs(resolve(values.rootfs));
    process.stdout.write(`${resolve(values.rootfs)}\n`);
    return 0;
  }
  for (const f of ['dist/src/node/main.js', 'dist/src/install/main.js', 'bin/plexus-cni']) {
    if (!existsSync(join(ROOT, f)) || lstatSync(join(ROOT, f)).size === 0)
      throw new Error(`${f} is missing: run npm run build first`);
  }
  // PLEXUS_IMAGE_VERSION: another version of the same build (the upgrade test rolls from one to the other).
  const version = process.env.PLEXUS_IMAGE_VERSION ?? PKG.version;
  const image = buildImage(
    values.name ?? `local.test/plexus:${version}`,
    resolve(values.out ?? join(ROOT, 'dist/image')),
  );
  const mib = (n: number): string => `${(n / 1048576).toFixed(1)} MiB`;
  process.stdout.write(
    `image ${image.name}: archive ${mib(image.archiveBytes)} (gzip layers), ${mib(image.uncompressedBytes)} unpacked\n${image.archive}\n`,
  );
  return 0;
}

if (require.main === module) process.exit(main());
