/**
 * The lesser edges of the CNI surface (issue 20, item 8): a container ID too long to name a file is the runtime's
 * mistake (code 4), an error never echoes a cniVersion Plexus does not speak, and a plexusd that cannot identify
 * the host's network namespace says so at start.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podArgs, type ShimCall } from '../support/daemon';
import { NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('dtc');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');
const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`;
let netns = '';

before(async () => {
  fx.trackHostLink(`${prefix}br`);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br`, subnet });
  await daemon.start();
  netns = fx.create('pod').path;
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
});

const add = (containerId: string): ShimCall => ({
  command: 'ADD',
  containerId,
  netns,
  ifname: 'eth0',
  args: podArgs('pod', containerId),
});

describe('a container ID too long for a file name', () => {
  for (const command of ['ADD', 'DEL', 'CHECK']) {
    it(`${command} with a 300-character container ID → code 4 naming the limit, and nothing is left behind`, async () => {
      const out = await daemon.cni({ ...add(`${prefix}${'a'.repeat(291)}`), command });
      assert.equal(out.json?.code, 4, out.stdout);
      assert.match(String(out.json?.msg), /CNI_CONTAINERID is 300 characters long; at most 128 are allowed/);
      assert.deepEqual(daemon.journalFiles(), []);
      assert.deepEqual(daemon.leases('podnet'), []);
    });
  }
});

describe('an error answering an unsupported cniVersion', () => {
  for (const [title, version] of [
    ['0.2.0', '0.2.0'],
    ['a 64 KiB version string', 'x'.repeat(65536)],
  ] as const) {
    it(`${title}: code 1, in cniVersion 1.1.0, naming the versions Plexus speaks`, async () => {
      const out = await daemon.cni({ ...add(`${prefix}v`), config: daemon.runtimeConfig({}, version) });
      assert.equal(out.json?.code, 1, out.stdout.slice(0, 300));
      assert.equal(out.json?.cniVersion, '1.1.0');
      assert.match(String(out.json?.details), /supported versions: 0\.3\.0, 0\.3\.1, 0\.4\.0, 1\.0\.0, 1\.1\.0/);
      assert.ok(out.stdout.length < 2048, `${out.stdout.length} bytes of error`);
    });
  }

  it('a supported older version is still answered in that version', async () => {
    const out = await daemon.cni({
      ...add(`${prefix}w`),
      config: daemon.runtimeConfig({ defaultNetwork: 'nosuch' }, '0.4.0'),
    });
    assert.equal(out.json?.code, 7, out.stdout);
    assert.equal(out.json?.cniVersion, '0.4.0');
  });
});

describe("the host's network namespace at start", () => {
  it('a plexusd that cannot read /proc/1/ns/net says so in its log', async () => {
    // In a user namespace of its own, PID 1's namespace files are out of reach (EACCES), as in some containers.
    const inUserns = new DaemonFixture('podnet');
    inUserns.launcher = ['unshare', '--user', '--map-root-user'];
    try {
      await inUserns.start().catch(() => undefined); // only its log is looked at
      assert.match(inUserns.stderr, /cannot identify the host's network namespace \(\/proc\/1\/ns\/net: EACCES\)/);
    } finally {
      await inUserns.stop();
    }
  });

  it('a plexusd that can read it says nothing about it', () => {
    // Where this test itself cannot read it (the suite runs in a container), neither can the daemon: then it says so.
    const readable = spawnSync('stat', ['-L', '/proc/1/ns/net']).status === 0;
    if (readable) assert.doesNotMatch(daemon.stderr, /host's network namespace/);
    else assert.match(daemon.stderr, /cannot identify the host's network namespace/);
  });
});
