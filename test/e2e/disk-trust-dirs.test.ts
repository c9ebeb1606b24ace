/**
 * The directories plexusd trusts: the socket's directory and the DEL spool in it (what is spooled there is replayed
 * as a DEL, so whoever can write there can unplug any pod). A real plexusd refuses to start on a directory another
 * user could write, or a symlink; a stale symlink at the socket path is removed, a directory there is reported.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { DaemonFixture, PLEXUSD } from '../support/daemon';

const NOBODY = 65534;
const roots: string[] = [];
after(() => {
  for (const dir of roots) rmSync(dir, { recursive: true, force: true });
});

/** A fresh directory tree for one daemon: <root>/run is where its socket goes. */
function tree(): { root: string; run: string; socket: string } {
  const root = mkdtempSync(join(tmpdir(), 'plexus-dt-'));
  roots.push(root);
  mkdirSync(join(root, 'networks'));
  return { root, run: join(root, 'run'), socket: join(root, 'run', 'plexus.sock') };
}

interface Outcome {
  readonly exitCode: number | null;
  readonly stderr: string;
}

/** Runs plexusd until it exits or 10 s pass (then it is killed: the test fails on exitCode null). */
function runDaemon(root: string, socket: string): Promise<Outcome> {
  const args = [
    '--socket',
    socket,
    '--state-dir',
    join(root, 'state'),
    '--networks-dir',
    join(root, 'networks'),
    '--log-level',
    'warn',
  ];
  const proc = spawn(PLEXUSD, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const timer = setTimeout(() => proc.kill('SIGKILL'), 10000);
  return new Promise((resolve) =>
    proc.once('close', (code) => {
      clearTimeout(timer);
      resolve({ exitCode: code, stderr });
    }),
  );
}

async function assertRefuses(root: string, socket: string, message: RegExp): Promise<void> {
  const out = await runDaemon(root, socket);
  assert.equal(out.exitCode, 1, `plexusd should refuse to start; stderr: ${out.stderr}`);
  assert.match(out.stderr, message);
}

const esc = (path: string): string => path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

describe('plexusd refuses a socket directory others could write', () => {
  it('a socket directory of mode 0777', async () => {
    const t = tree();
    mkdirSync(t.run);
    chmodSync(t.run, 0o777);
    await assertRefuses(
      t.root,
      t.socket,
      new RegExp(`socket directory ${esc(t.run)} is writable by group or others \\(mode 0777; chmod go-w`),
    );
    assert.deepEqual(readdirSync(t.run), [], 'nothing was made in it');
  });

  it('a socket directory that is a symlink', async () => {
    const t = tree();
    mkdirSync(join(t.root, 'real'), { mode: 0o755 });
    symlinkSync(join(t.root, 'real'), t.run);
    await assertRefuses(t.root, t.socket, new RegExp(`socket directory ${esc(t.run)} is a symbolic link`));
    assert.deepEqual(readdirSync(join(t.root, 'real')), []);
  });

  it('a socket directory owned by another user', async () => {
    const t = tree();
    mkdirSync(t.run, { mode: 0o755 });
    chownSync(t.run, NOBODY, NOBODY);
    await assertRefuses(
      t.root,
      t.socket,
      new RegExp(`socket directory ${esc(t.run)} is owned by uid ${NOBODY}, not by plexusd's uid 0`),
    );
  });

  it('a socket directory inside a directory others could write without the sticky bit', async () => {
    const t = tree();
    chmodSync(t.root, 0o777);
    await assertRefuses(
      t.root,
      t.socket,
      new RegExp(
        `${esc(t.root)}, above the socket directory ${esc(t.run)}, is writable by group or others without the sticky bit`,
      ),
    );
  });
});

describe('plexusd refuses a DEL spool others could write', () => {
  for (const [title, make, message] of [
    [
      'a spool of mode 0777',
      (spool: string) => (mkdirSync(spool), chmodSync(spool, 0o777)),
      /is writable by group or others \(mode 0777; chmod go-w/,
    ],
    [
      'a spool that is a symlink',
      (spool: string) => (mkdirSync(`${spool}.elsewhere`, { mode: 0o700 }), symlinkSync(`${spool}.elsewhere`, spool)),
      /is a symbolic link/,
    ],
    [
      'a spool owned by another user',
      (spool: string) => (mkdirSync(spool, { mode: 0o700 }), chownSync(spool, NOBODY, NOBODY)),
      /is owned by uid 65534/,
    ],
  ] as const) {
    it(title, async () => {
      const t = tree();
      mkdirSync(t.run, { mode: 0o755 });
      const spool = join(t.run, 'pending-del');
      make(spool);
      await assertRefuses(t.root, t.socket, new RegExp(`DEL spool ${esc(spool)} ${message.source}`));
    });
  }
});

describe('what is at the socket path', () => {
  it('a dangling symlink is removed and plexusd listens there', async () => {
    const daemon = new DaemonFixture('podnet');
    try {
      mkdirSync(join(daemon.dir, 'run'), { mode: 0o755 });
      symlinkSync(join(daemon.dir, 'gone.sock'), daemon.socket);
      await daemon.start();
      assert.ok(lstatSync(daemon.socket).isSocket());
      assert.match(daemon.stderr, /removed a symbolic link at the socket path/);
    } finally {
      await daemon.stop();
    }
  });

  it('a directory is reported as a directory, not as "address in use"', async () => {
    const t = tree();
    mkdirSync(t.socket, { recursive: true, mode: 0o755 });
    await assertRefuses(t.root, t.socket, new RegExp(`${esc(t.socket)} is a directory, not a socket`));
    assert.ok(lstatSync(t.socket).isDirectory(), 'left as it was');
  });
});

describe('files in the DEL spool', () => {
  it('a FIFO or a symlink in the spool is set aside, and plexusd becomes ready', async () => {
    const daemon = new DaemonFixture('podnet');
    try {
      const spool = join(daemon.dir, 'run', 'pending-del');
      mkdirSync(spool, { recursive: true, mode: 0o700 });
      chmodSync(join(daemon.dir, 'run'), 0o755);
      execFileSync('mkfifo', [join(spool, 'fifo.json')]);
      writeFileSync(join(daemon.dir, 'precious'), "not plexusd's");
      symlinkSync(join(daemon.dir, 'precious'), join(spool, 'link.json'));
      await daemon.start(8000);
      assert.deepEqual(readdirSync(spool).sort(), ['fifo.json.bad', 'link.json.bad']);
      assert.ok(lstatSync(join(spool, 'link.json.bad')).isSymbolicLink(), 'the link itself was moved, not its target');
      assert.ok(lstatSync(join(daemon.dir, 'precious')).isFile());
    } finally {
      const pid = daemon.pid;
      const stuck = setTimeout(() => pid !== undefined && process.kill(pid, 'SIGKILL'), 3000);
      await daemon.stop();
      clearTimeout(stuck);
    }
  });
});
