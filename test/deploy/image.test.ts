/**
 * The image `bash scripts/image.sh` builds, imported into a private containerd and run with ctr: its programs start
 * (plexusd, plexusctl, plexus-install on the image's own Node and libraries; koffi loads libc for the kernel calls),
 * the shim answers VERSION, busybox gives a shell, and nothing for building is inside.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ContainerdFixture, containerdMissing } from '../support/containerd';
import { ROOT } from '../support/daemon';
import { uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';

const prefix = uniquePrefix('pi');
const NAME = `local.test/plexus-${prefix}:test`;
const busyboxMissing = (): string | undefined => {
  try {
    execFileSync('busybox', ['true']);
    return undefined;
  } catch {
    return 'busybox not installed (apt-get install busybox-static; bash scripts/setup.sh does)';
  }
};

describe('the Plexus image', { skip: expectedPrerequisites(containerdMissing(), busyboxMissing()) }, () => {
  const out = mkdtempSync(join(tmpdir(), `plexus-image-${prefix}-`));
  let containerd: ContainerdFixture;
  let archive = '';
  let n = 0;

  /** Runs one command in a fresh container of the image and returns its exit code and output. */
  const run = (args: readonly string[], env: Record<string, string> = {}): { status: number | null; out: string } =>
    containerd.ctr([
      'run',
      '--rm',
      ...Object.entries(env).flatMap(([k, v]) => ['--env', `${k}=${v}`]),
      NAME,
      `${prefix}-${n++}`,
      ...args,
    ]);

  before(async () => {
    const printed = execFileSync('bash', [join(ROOT, 'scripts/image.sh'), '--name', NAME, '--out', out], {
      encoding: 'utf8',
      env: { ...process.env, PLEXUS_IMAGE_SKIP_BUILD: '1' },
      maxBuffer: 16 << 20,
    });
    archive = printed.trim().split('\n').at(-1) ?? '';
    containerd = await ContainerdFixture.start();
  });
  after(async () => {
    await containerd?.stop();
    rmSync(out, { recursive: true, force: true });
  });

  it('prints the archive path on its last line, and ctr images import accepts the archive', () => {
    assert.match(archive, /\.tar$/);
    assert.ok(archive.startsWith(out), archive);
    const r = containerd.ctr(['images', 'import', archive]);
    assert.equal(r.status, 0, r.out);
    assert.match(containerd.ctr(['images', 'ls', '-q']).out, new RegExp(NAME.replace(/[.]/g, '\\.')));
  });

  it("runs plexusd --help with the image's own Node runtime", () => {
    const r = run(['/usr/local/bin/plexusd', '--help']);
    assert.equal(r.status, 0, r.out);
    assert.match(r.out, /^usage: plexusd/);
    assert.match(r.out, /--install-cni-config/);
  });

  it('runs plexusctl and plexus-install', () => {
    const ctl = run(['/usr/local/bin/plexusctl', '--help']);
    assert.match(ctl.out, /plexusctl/, ctl.out);
    const install = run(['/usr/local/bin/plexus-install', '--help']);
    assert.equal(install.status, 0, install.out);
    assert.match(install.out, /^usage: plexus-install install/);
  });

  it('answers CNI VERSION from the shim', () => {
    // ctr keeps the container's stdin open, and the shim reads its config to the end first.
    const r = run(['/bin/sh', '-c', 'plexus-cni </dev/null'], {
      CNI_COMMAND: 'VERSION',
      PLEXUS_SOCKET: '/nonexistent.sock',
    });
    assert.equal(r.status, 0, r.out);
    const reply = JSON.parse(r.out) as { supportedVersions: string[] };
    assert.ok(reply.supportedVersions.includes('1.0.0'), r.out);
  });

  it('loads libc through koffi, as the kernel worker does', () => {
    const r = run([
      '/usr/bin/node',
      '-e',
      "const k=require('/opt/plexus/node_modules/koffi');const libc=k.load('libc.so.6');process.stdout.write(String(libc.func('int getpid()')()>0))",
    ]);
    assert.equal(r.status, 0, r.out);
    assert.equal(r.out.trim(), 'true');
  });

  it('has a shell for debugging and nothing for building', () => {
    const r = run([
      '/bin/sh',
      '-c',
      'ls /opt/plexus /opt/plexus/node_modules /opt/plexus/dist; test -e /opt/plexus/node_modules/typescript && echo HAS-TS; test -e /opt/plexus/dist/test && echo HAS-TESTS; echo done',
    ]);
    assert.equal(r.status, 0, r.out);
    assert.match(r.out, /done/);
    assert.doesNotMatch(r.out, /HAS-TS|HAS-TESTS/);
    assert.match(r.out, /koffi/);
  });
});
