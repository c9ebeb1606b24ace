/**
 * The installer on real directories (a private CNI bin and conf dir per test, never the host's): which config is
 * the node's primary one, the shim replaced while it runs, uninstall, and plexusd writing Plexus's conflist once
 * it is ready with the primary config's cniVersion.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, beforeEach, describe, it } from 'node:test';
import pino from 'pino';
import {
  findPrimaryConfig,
  installShim,
  PLEXUS_CONFLIST,
  plexusConflist,
  replaceFile,
  uninstall,
} from '../../src/install/cni-conf';
import { parseInstallArgs, runInstall } from '../../src/install/main';
import { DaemonFixture, SHIM } from '../support/daemon';

const silent = pino({ level: 'silent' });

/** Captures what is written to stderr (plexus-install's usage errors) until restored. */
function captureStderr(): { text: () => string; restore: () => void } {
  const write = process.stderr.write.bind(process.stderr);
  let text = '';
  process.stderr.write = (chunk: string | Uint8Array): boolean => {
    text += chunk.toString();
    return true;
  };
  return { text: () => text, restore: () => void (process.stderr.write = write) };
}
const bridgeConflist = (name: string, cniVersion = '1.0.0'): string =>
  JSON.stringify({
    cniVersion,
    name,
    plugins: [{ type: 'bridge', bridge: 'cni0', ipam: { type: 'host-local', ranges: [[{ subnet: '10.99.0.0/24' }]] } }],
  });

describe('the installer', () => {
  let dir = '';
  let confDir = '';
  let binDir = '';
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'plexus-install-'));
    confDir = join(dir, 'net.d');
    binDir = join(dir, 'bin');
    mkdirSync(confDir);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  describe('the primary CNI config', () => {
    it('is the first .conf, .conflist or .json file in name order, as libcni loads them', () => {
      writeFileSync(join(confDir, '20-b.conflist'), bridgeConflist('b'));
      writeFileSync(join(confDir, '10-a.json'), JSON.stringify({ cniVersion: '0.4.0', name: 'a', type: 'bridge' }));
      writeFileSync(join(confDir, '05-notes.txt'), 'not a config');
      writeFileSync(join(confDir, '.05-partial.conflist.123.tmp'), '{');
      mkdirSync(join(confDir, '01-dir.conf'));
      const r = findPrimaryConfig(confDir);
      assert.deepEqual(r, { ok: true, value: { path: join(confDir, '10-a.json'), cniVersion: '0.4.0', name: 'a' } });
    });

    it("skips Plexus's own conflist and any other config that runs plexus-cni", () => {
      writeFileSync(
        join(confDir, PLEXUS_CONFLIST),
        plexusConflist({ cniVersion: '1.0.0', socketPath: '/run/plexus/plexus.sock' }),
      );
      writeFileSync(
        join(confDir, '01-old-plexus.conf'),
        JSON.stringify({ cniVersion: '1.0.0', name: 'plexus', type: 'plexus-cni' }),
      );
      writeFileSync(join(confDir, '10-flannel.conflist'), bridgeConflist('cbr0', '0.3.1'));
      const r = findPrimaryConfig(confDir);
      assert.ok(r.ok && r.value);
      assert.equal(r.value.path, join(confDir, '10-flannel.conflist'));
      assert.equal(r.value.cniVersion, '0.3.1');
    });

    it('is reported, not skipped, when it does not parse (the runtime would fail on it too)', () => {
      writeFileSync(join(confDir, '10-broken.conflist'), '{"cniVersion":');
      writeFileSync(join(confDir, '20-good.conflist'), bridgeConflist('good'));
      const r = findPrimaryConfig(confDir);
      assert.ok(!r.ok);
      assert.match(r.error.message, /10-broken\.conflist is not usable/);
    });

    it('is absent when only Plexus is there', () => {
      writeFileSync(join(confDir, PLEXUS_CONFLIST), plexusConflist({ cniVersion: '1.0.0', socketPath: '/s' }));
      assert.deepEqual(findPrimaryConfig(confDir), { ok: true, value: undefined });
    });
  });

  describe('replacing files', () => {
    it('writes by rename and leaves a file with the same content untouched', () => {
      const path = join(confDir, PLEXUS_CONFLIST);
      assert.equal(replaceFile(path, 'one\n', 0o644), true);
      const inode = statSync(path).ino;
      assert.equal(replaceFile(path, 'one\n', 0o644), false);
      assert.equal(statSync(path).ino, inode);
      assert.equal(replaceFile(path, 'two\n', 0o644), true);
      assert.notEqual(statSync(path).ino, inode, 'a new inode: renamed over, not rewritten in place');
      assert.equal(readFileSync(path, 'utf8'), 'two\n');
      assert.equal(statSync(path).mode & 0o777, 0o644);
      assert.deepEqual(readdirSync(confDir), [PLEXUS_CONFLIST], 'no temporary file left');
    });

    it('replaces a shim that is running, which writing in place cannot (ETXTBSY)', async () => {
      mkdirSync(binDir);
      installShim(SHIM, binDir);
      const installed = join(binDir, 'plexus-cni');
      assert.equal(statSync(installed).mode & 0o777, 0o755);
      // A shim waiting for a daemon that is not there: it runs for about 2 s.
      const busy = spawn(installed, [], {
        env: {
          CNI_COMMAND: 'ADD',
          CNI_CONTAINERID: 'c1',
          CNI_NETNS: '/proc/self/ns/net',
          CNI_IFNAME: 'eth0',
          CNI_PATH: binDir,
        },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      busy.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      const exited = new Promise<number | null>((r) => busy.on('close', (code) => r(code)));
      busy.stdin.end(
        JSON.stringify({
          cniVersion: '1.0.0',
          name: 'plexus',
          type: 'plexus-cni',
          socketPath: join(dir, 'absent.sock'),
          daemonWaitSeconds: 2,
        }),
      );
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(busy.exitCode, null, 'the shim is still running');
      assert.throws(() => openSync(installed, 'w'), /ETXTBSY/);
      const newer = join(dir, 'plexus-cni.new');
      copyFileSync(SHIM, newer);
      writeFileSync(newer, Buffer.concat([readFileSync(SHIM), Buffer.from('\0plexus-test-build\0')]));
      assert.equal(installShim(newer, binDir), true);
      assert.deepEqual(readFileSync(installed), readFileSync(newer));
      assert.equal(busy.exitCode, null, 'the running shim was not disturbed');
      assert.equal(await exited, 1);
      assert.equal(
        (JSON.parse(stdout) as { code: number }).code,
        11,
        'it ends as it would have: the daemon is unreachable (11)',
      );
    });
  });

  describe('plexus-install', () => {
    it('install: copies the shim and links the primary config for plexusd --default-network', async () => {
      writeFileSync(join(confDir, '10-bridge.conflist'), bridgeConflist('podnet'));
      const link = join(dir, 'state', 'default-network');
      const code = await runInstall(
        ['install', '--cni-bin-dir', binDir, '--cni-conf-dir', confDir, '--shim', SHIM, '--default-network-link', link],
        silent,
      );
      assert.equal(code, 0);
      assert.deepEqual(readFileSync(join(binDir, 'plexus-cni')), readFileSync(SHIM));
      assert.equal(readlinkSync(link), join(confDir, '10-bridge.conflist'));
      assert.deepEqual(
        readdirSync(confDir),
        ['10-bridge.conflist'],
        "the conf dir is plexusd's to write, once it is ready",
      );
    });

    it('install: waits for the cluster network plugin to write its config', async () => {
      const link = join(dir, 'default-network');
      const running = runInstall(
        [
          'install',
          '--cni-bin-dir',
          binDir,
          '--cni-conf-dir',
          confDir,
          '--shim',
          SHIM,
          '--default-network-link',
          link,
          '--wait-seconds',
          '10',
        ],
        silent,
      );
      await new Promise((r) => setTimeout(r, 700));
      assert.equal(existsSync(link), false);
      writeFileSync(join(confDir, '10-late.conflist'), bridgeConflist('late'));
      assert.equal(await running, 0);
      assert.equal(readlinkSync(link), join(confDir, '10-late.conflist'));
    });

    it('install: fails after --wait-seconds without a primary config, saying what to install, linking nothing', async () => {
      const lines: string[] = [];
      const log = pino({ level: 'info' }, { write: (l: string) => void lines.push(l) });
      const link = join(dir, 'l');
      const started = Date.now();
      const code = await runInstall(
        [
          'install',
          '--cni-bin-dir',
          binDir,
          '--cni-conf-dir',
          confDir,
          '--shim',
          SHIM,
          '--default-network-link',
          link,
          '--wait-seconds',
          '0.3',
        ],
        log,
      );
      const waited = Date.now() - started;
      assert.equal(code, 1);
      assert.ok(waited >= 300, `it waited the 0.3 s it was given (${waited} ms)`);
      const error = lines.map((l) => JSON.parse(l) as { level: number; msg: string }).find((l) => l.level >= 50);
      assert.equal(
        error?.msg,
        `no CNI config other than ${PLEXUS_CONFLIST} in ${confDir}: install the cluster's network plugin first`,
      );
      assert.equal(existsSync(link), false, 'no link to a config that is not there');
    });

    it("install then uninstall: the runtime is back on the node's own config, which was never changed", async () => {
      const primary = join(confDir, '10-bridge.conflist');
      writeFileSync(primary, bridgeConflist('podnet'));
      const before = readFileSync(primary);
      assert.equal(
        await runInstall(
          [
            'install',
            '--cni-bin-dir',
            binDir,
            '--cni-conf-dir',
            confDir,
            '--shim',
            SHIM,
            '--default-network-link',
            join(dir, 'l'),
          ],
          silent,
        ),
        0,
      );
      writeFileSync(
        join(confDir, PLEXUS_CONFLIST),
        plexusConflist({ cniVersion: '1.0.0', socketPath: '/run/plexus/plexus.sock' }),
      );
      assert.equal(await runInstall(['uninstall', '--cni-bin-dir', binDir, '--cni-conf-dir', confDir], silent), 0);
      assert.deepEqual(readdirSync(confDir), ['10-bridge.conflist']);
      assert.deepEqual(readFileSync(primary), before);
      assert.equal(existsSync(join(binDir, 'plexus-cni')), false);
      const first = findPrimaryConfig(confDir);
      assert.ok(first.ok && first.value?.path === primary);
    });

    it("uninstall leaves a 00-plexus.conflist that is not Plexus's", () => {
      writeFileSync(join(confDir, PLEXUS_CONFLIST), bridgeConflist('someone-else'));
      assert.deepEqual(uninstall(confDir, join(dir, 'nobin')), []);
      assert.ok(existsSync(join(confDir, PLEXUS_CONFLIST)));
    });

    it('refuses a relative path or an unknown command, saying which, and installs nothing', async () => {
      assert.deepEqual(parseInstallArgs(['install', '--cni-conf-dir', 'net.d']), {
        kind: 'error',
        message: '--cni-conf-dir must be an absolute path',
      });
      assert.deepEqual(parseInstallArgs(['reinstall']), {
        kind: 'error',
        message: 'expected one command: install or uninstall',
      });
      const usage = captureStderr();
      try {
        assert.equal(
          await runInstall(['install', '--cni-bin-dir', binDir, '--cni-conf-dir', 'net.d', '--shim', SHIM], silent),
          2,
        );
        assert.equal(await runInstall(['reinstall', '--cni-bin-dir', binDir], silent), 2);
      } finally {
        usage.restore();
      }
      assert.match(
        usage.text(),
        /--cni-conf-dir must be an absolute path[\s\S]*expected one command: install or uninstall/,
      );
      assert.equal(existsSync(binDir), false, 'no shim was installed');
    });
  });
});

describe('plexusd --install-cni-config', () => {
  const daemons: DaemonFixture[] = [];
  after(async () => {
    for (const d of daemons) await d.stop();
  });

  it("writes Plexus's conflist once ready, with the default network file's cniVersion and its own socket", async () => {
    const probe = new DaemonFixture();
    daemons.push(probe);
    const confDir = join(probe.dir, 'net.d');
    mkdirSync(confDir);
    const primary = join(confDir, '10-bridge.conflist');
    writeFileSync(primary, bridgeConflist('podnet', '0.4.0'));
    const out = join(confDir, PLEXUS_CONFLIST);
    const daemon = new DaemonFixture(primary, { installCniConfig: out });
    daemons.push(daemon);
    await daemon.start();
    const written = JSON.parse(readFileSync(out, 'utf8')) as {
      cniVersion: string;
      plugins: { type: string; socketPath: string; capabilities: Record<string, boolean> }[];
    };
    assert.equal(written.cniVersion, '0.4.0');
    assert.equal(written.plugins[0]?.type, 'plexus-cni');
    assert.equal(written.plugins[0]?.socketPath, daemon.socket);
    assert.equal(written.plugins[0]?.capabilities['io.kubernetes.cri.pod-annotations'], true);
    const first = findPrimaryConfig(confDir);
    assert.ok(first.ok && first.value?.path === primary, "the primary config is still found behind Plexus's");
  });

  it("writes the cniVersion --install-cni-version sets over the default network file's", async () => {
    const probe = new DaemonFixture();
    daemons.push(probe);
    const confDir = join(probe.dir, 'net.d');
    mkdirSync(confDir);
    const primary = join(confDir, '10-bridge.conflist');
    writeFileSync(primary, bridgeConflist('podnet', '0.4.0'));
    const out = join(confDir, PLEXUS_CONFLIST);
    const daemon = new DaemonFixture(primary, { installCniConfig: out, installCniVersion: '1.1.0' });
    daemons.push(daemon);
    await daemon.start();
    assert.equal((JSON.parse(readFileSync(out, 'utf8')) as { cniVersion: string }).cniVersion, '1.1.0');
  });

  it('refuses to start, writing nothing, when the default network file cannot be read', async () => {
    const daemon = new DaemonFixture('/nonexistent/10-bridge.conflist', {
      installCniConfig: '/nonexistent/00-plexus.conflist',
    });
    daemons.push(daemon);
    const out = join(daemon.dir, '00-plexus.conflist');
    daemon.addSettings({ installCniConfig: out });
    await assert.rejects(daemon.start(), /exited with 1[\s\S]*cannot be read/);
    assert.equal(existsSync(out), false);
  });
});
