/**
 * The conflist the README documents, on this run's containerd (2.1 of the default pair, whose CNI library knows 1.1.0;
 * Debian's 1.6 of the older pair, whose library knows versions up to 1.0.0): `ctr run --cni` reads /etc/cni/net.d and
 * /opt/cni/bin as the CRI plugin does and goes through the same go-cni and libcni code. With cniVersion 1.0.0 a
 * container gets its networks and loses them when it stops; with 1.1.0 containerd 2 does the same and containerd 1.6
 * refuses plexusd's result, as docs/configuration.md says. Host paths are restored afterwards.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { ContainerdFixture, containerdMajor, containerdMissing, HostFiles } from '../support/containerd';
import { DaemonFixture, ROOT, SHIM } from '../support/daemon';
import { NetnsFixture, uniquePrefix } from '../support/netns';
import { expectedPrerequisites, skipOptional } from '../support/prerequisites';

const CONF_DIR = '/etc/cni/net.d';
const prefix = uniquePrefix('pk');
const confFile = join(CONF_DIR, `00-plexus-${prefix}.conflist`);
const missing = containerdMissing();
// containerd uses the first config in name order: another one sorting first would make this test about it.
const firstConf = (): string | undefined => {
  try {
    return readdirSync(CONF_DIR)
      .filter((f) => /\.(conf|conflist|json)$/.test(f))
      .sort()[0];
  } catch {
    return undefined;
  }
};
const shadowed =
  !missing && firstConf() !== undefined && firstConf()! < `00-plexus-${prefix}.conflist`
    ? `${CONF_DIR}/${firstConf()} sorts before this test's config`
    : undefined;
const skip = expectedPrerequisites(missing, shadowed);
const major = missing ? 0 : containerdMajor();

describe(`the documented conflist on containerd ${major}`, { skip }, () => {
  const fx = new NetnsFixture(prefix);
  const o = 200 + Math.floor(Math.random() * 50);
  const t = Math.floor(Math.random() * 200);
  const daemon = new DaemonFixture('podnet', { defaultNetworks: 'sec' });
  const host = new HostFiles();
  let containerd: ContainerdFixture;
  let image = '';

  /** The README's runtime config, pointed at this test's daemon. */
  const conflist = (cniVersion: string): string =>
    JSON.stringify({
      cniVersion,
      name: 'plexus',
      plugins: [
        { type: 'plexus-cni', socketPath: daemon.socket, capabilities: { 'io.kubernetes.cri.pod-annotations': true } },
      ],
    });
  const leftovers = (): unknown => ({
    leases: [...daemon.leases('podnet'), ...daemon.leases('sec')],
    journal: daemon.journalFiles(),
  });

  /** A container run with the conflist at `cniVersion` gets eth0 and net1, and loses them (and leases) when it stops. */
  const attachesAndDetaches = async (cniVersion: string, id: string): Promise<void> => {
    host.write(confFile, conflist(cniVersion));
    const run = containerd.ctrRun(['--rm', '--cni', image, id]);
    let pid: number;
    try {
      pid = await containerd.taskPid(id);
    } catch (e) {
      run.proc.kill();
      throw new Error(`${(e as Error).message}\nctr run: ${(await run.done).out}`, { cause: e });
    }
    const addrs = execFileSync('nsenter', ['-t', String(pid), '-n', 'ip', '-o', '-4', 'addr', 'show'], {
      encoding: 'utf8',
    });
    assert.match(addrs, new RegExp(`eth0\\s+inet 10\\.${o}\\.${t}\\.\\d+/24`), addrs);
    assert.match(addrs, new RegExp(`net1\\s+inet 10\\.${o}\\.${t + 1}\\.\\d+/24`), addrs);
    assert.equal(daemon.leases('podnet').length, 1);
    assert.equal(daemon.journalFiles().length, 1);
    const journal = readFileSync(join(daemon.stateDir, 'journal', daemon.journalFiles()[0]!), 'utf8');
    assert.ok(journal.includes(`"cniVersion":"${cniVersion}"`), 'plexusd answered in the version containerd asked for');

    assert.equal(containerd.ctr(['tasks', 'kill', id]).status, 0);
    const done = await run.done;
    assert.equal(done.code, 0, done.out);
    // DEL answers before its background teardown is done (docs/performance.md, "DEL"): the record goes when it is.
    for (let i = 0; i < 100 && daemon.journalFiles().length > 0; i++) await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(leftovers(), { leases: [], journal: [] }, 'containerd ran DEL when the container stopped');
  };

  before(async () => {
    fx.trackHostLink(`${prefix}b0`);
    fx.trackHostLink(`${prefix}b1`);
    daemon.writeBridgeNetwork({
      name: 'podnet',
      bridge: `${prefix}b0`,
      subnet: `10.${o}.${t}.0/24`,
      cniVersion: '1.0.0',
    });
    daemon.writeBridgeNetwork({
      name: 'sec',
      bridge: `${prefix}b1`,
      subnet: `10.${o}.${t + 1}.0/24`,
      cniVersion: '1.0.0',
    });
    await daemon.start();
    host.write('/opt/cni/bin/plexus-cni', readFileSync(SHIM), 0o755);
    containerd = await ContainerdFixture.start();
    image = containerd.importPause();
  });
  after(async () => {
    await containerd?.stop();
    host.restore();
    await daemon.stop();
    fx.cleanup();
  });

  it('with cniVersion 1.0.0 a container gets eth0 and net1, and loses them (and their leases) when it stops', () =>
    attachesAndDetaches('1.0.0', `${prefix}ok`));

  it('with cniVersion 1.1.0 containerd 2 takes the result: eth0 and net1, gone when the container stops', (t) => {
    if (skipOptional(t, major < 2 ? 'containerd 1.6 refuses a 1.1.0 result (the next test)' : undefined)) return;
    return attachesAndDetaches('1.1.0', `${prefix}v11`);
  });

  it('with cniVersion 1.1.0 containerd 1.6 refuses the result: "unsupported CNI result version"', async (t) => {
    if (skipOptional(t, major >= 2 ? 'containerd 2 takes a 1.1.0 result (the test before)' : undefined)) return;
    host.write(confFile, conflist('1.1.0'));
    const run = containerd.ctrRun(['--rm', '--cni', image, `${prefix}new`]);
    const timer = setTimeout(() => run.proc.kill(), 30000);
    const done = await run.done;
    clearTimeout(timer);
    assert.notEqual(done.code, 0);
    assert.match(done.out, /unsupported CNI result version "1\.1\.0"/, done.out);
    // ctr, unlike the CRI plugin, sends no DEL after a failed ADD: collect what its lost sandbox left.
    await promisify(execFile)(join(ROOT, 'bin/plexusctl'), ['--socket', daemon.socket, 'gc']);
    assert.deepEqual(leftovers(), { leases: [], journal: [] });
  });
});
