/**
 * NetworkAttachmentDefinition files that are not what a file should be: a 10 MB file, a FIFO, a symlink to
 * /dev/zero, a directory. A real plexusd reports each as a broken definition with the reason, stays up with its
 * memory bounded, and keeps serving the good definitions, including one reached through a symlink (a ConfigMap).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { DaemonFixture, getJson, podArgs, type ShimCall } from '../support/daemon';
import { NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('dtf');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');
const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`;
const cid = `${prefix}c`;
let netns = '';

const nad = (name: string): string =>
  JSON.stringify({
    apiVersion: 'k8s.cni.cncf.io/v1',
    kind: 'NetworkAttachmentDefinition',
    metadata: { name, namespace: 'default' },
    spec: {
      config: JSON.stringify({
        cniVersion: '1.1.0',
        name,
        type: 'bridge',
        bridge: `${prefix}br`,
        ipam: { type: 'host-local', ranges: [[{ subnet }]] },
      }),
    },
  });

/** Asks within a deadline: a daemon hung on a FIFO must fail the test, not hang it. */
async function withDeadline<T>(what: string, ms: number, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>(
    (_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms)),
  );
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** The daemon's peak resident memory (VmHWM), in MiB. */
const peakRssMib = (pid: number): number =>
  Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024;

before(async () => {
  fx.trackHostLink(`${prefix}br`);
  fx.trackHostLink(hostVethName(cid, 'eth0', 'eth0'));
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br`, subnet });
  // 10 MB of a valid YAML comment: only its size is wrong.
  writeFileSync(join(daemon.networksDir, 'huge.yaml'), `# ${'x'.repeat(10 * 1024 * 1024)}\n${nad('huge')}\n`);
  execFileSync('mkfifo', [join(daemon.networksDir, 'fifo.yaml')]);
  symlinkSync('/dev/zero', join(daemon.networksDir, 'zero.yaml'));
  mkdirSync(join(daemon.networksDir, 'dir.yaml'));
  // As a ConfigMap mount does: the file in the directory is a symlink to a regular file elsewhere.
  mkdirSync(join(daemon.dir, 'configmap'));
  writeFileSync(join(daemon.dir, 'configmap', 'linked.json'), nad('linked'));
  symlinkSync(join(daemon.dir, 'configmap', 'linked.json'), join(daemon.networksDir, 'linked.json'));
  for (let i = 0; i < 9; i++) writeFileSync(join(daemon.networksDir, `garbage${i}.yaml`), 'spec: [unclosed\n');
  await daemon.start();
  netns = fx.create('pod').path;
});
after(async () => {
  // A daemon stuck in a read (what this file tests against) never handles SIGTERM.
  const pid = daemon.pid;
  const stuck = setTimeout(() => pid !== undefined && process.kill(pid, 'SIGKILL'), 3000);
  await daemon.stop();
  clearTimeout(stuck);
  fx.cleanup();
});

const add = (defaultNetwork: string): ShimCall => ({
  command: 'ADD',
  containerId: cid,
  netns,
  ifname: 'eth0',
  args: podArgs('pod', cid),
  config: daemon.runtimeConfig({ defaultNetwork }),
});

describe('NAD files that are not plain, small files', () => {
  it('each is reported broken with its reason, and the good ones are listed', async () => {
    const res = await withDeadline('GET /v1/networks', 5000, getJson(daemon.socket, '/v1/networks'));
    const body = res.body as { networks: { key: string }[]; errors: { msg: string }[] };
    assert.deepEqual(body.networks.map((n) => n.key).sort(), ['default/linked', 'default/podnet']);
    const msgs = body.errors.map((e) => e.msg).join('\n');
    const file = (name: string): string => join(daemon.networksDir, name).replace(/[.]/g, '\\.');
    assert.match(msgs, new RegExp(`${file('huge.yaml')} is larger than 1 MiB`));
    assert.match(msgs, new RegExp(`${file('fifo.yaml')} is a FIFO, not a regular file`));
    assert.match(msgs, new RegExp(`${file('zero.yaml')} is a character device, not a regular file`));
    assert.match(msgs, new RegExp(`${file('dir.yaml')} is a directory, not a regular file`));
  });

  it('plexusd stays up with its peak memory under 150 MiB', async (t) => {
    await withDeadline('GET /v1/networks', 5000, getJson(daemon.socket, '/v1/networks'));
    assert.ok(daemon.alive, daemon.stderr);
    const peak = peakRssMib(daemon.pid!);
    t.diagnostic(`peak RSS ${peak.toFixed(1)} MiB`);
    assert.ok(peak < 150, `peak RSS ${peak.toFixed(1)} MiB`);
  });

  it('a pod of a good network is attached, also through a symlinked definition', async () => {
    for (const network of ['podnet', 'linked']) {
      const out = await withDeadline('ADD', 10000, daemon.cni(add(network)));
      assert.equal(out.code, 0, out.stdout);
      assert.equal((await daemon.cni({ ...add(network), command: 'DEL' })).code, 0);
    }
  });

  it('a network that is not defined names the first 10 broken files and how many more', async () => {
    const out = await withDeadline('ADD', 10000, daemon.cni(add('nosuch')));
    assert.equal(out.json?.code, 7, out.stdout);
    // 13 broken files: the 4 above and 9 of garbage.
    assert.match(String(out.json?.msg), /; and 3 more\)$/);
    assert.equal(String(out.json?.msg).split(daemon.networksDir).length - 1, 11, 'the directory once, then 10 files');
  });
});
