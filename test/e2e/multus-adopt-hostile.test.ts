/**
 * Multus's and libcni's caches are another program's files, written from what pods and NADs ask for: plexusd reads
 * them as hostile input. Each cache here is written by hand as Multus v4 writes it (a JSON list of delegates, each with
 * its config as base64 `Bytes`), and its sandbox's DEL reaches a real plexusd through plexus-cni, as the runtime sends
 * it once Plexus serves the node.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podArgs, podCall, podMaker } from '../support/daemon';
import { NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { plexusPluginDir } from '../support/plugin-dir';

const prefix = uniquePrefix('mh');
const fx = new NetnsFixture(prefix);
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 250);
const base = new DaemonFixture('podnet');
const binDir = join(base.dir, 'cni-bin');
const cacheDir = join(base.dir, 'multus-cache');
const primaryFile = join(base.dir, '10-podnet.conflist');
const primary = {
  cniVersion: '1.0.0',
  name: 'podnet',
  plugins: [
    {
      type: 'bridge',
      bridge: `${prefix}br0`,
      ipam: { type: 'host-local', dataDir: join(base.dir, 'leases'), ranges: [[{ subnet: `10.${o}.${t}.0/24` }]] },
    },
  ],
};
const daemon = new DaemonFixture(primaryFile, { cniBinDir: binDir, multusCacheDir: cacheDir });

before(async () => {
  plexusPluginDir(binDir);
  mkdirSync(join(cacheDir, 'results'), { recursive: true });
  writeFileSync(primaryFile, JSON.stringify(primary));
  fx.trackHostLink(`${prefix}br0`);
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  await base.stop();
  fx.cleanup();
});

const newPod = podMaker(fx, prefix, ['eth0']);

interface Delegate {
  readonly config: Record<string, unknown>;
  readonly ifnameRequest?: string;
}

/** Multus's cache of a sandbox, as its saveDelegates writes it. */
function writeMultusCache(containerId: string, delegates: readonly Delegate[]): string {
  const path = join(cacheDir, containerId);
  const list = delegates.map((d) => ({
    Name: d.config.name,
    Bytes: Buffer.from(JSON.stringify(d.config)).toString('base64'),
    ifnameRequest: d.ifnameRequest ?? '',
    MasterPlugin: false,
  }));
  writeFileSync(path, JSON.stringify(list));
  return path;
}

/** The runtime's DEL of a sandbox, as containerd sends its last one (no netns). */
const runtimeDel = (containerId: string) =>
  daemon.cni({
    command: 'DEL',
    containerId,
    netns: '',
    ifname: 'eth0',
    args: podArgs('victim-pod', containerId),
    config: daemon.runtimeConfig({}, '1.0.0'),
  });

/** The time a promise took, in ms, with its value. */
async function timed<T>(p: Promise<T>): Promise<{ value: T; ms: number }> {
  const start = Date.now();
  const value = await p;
  return { value, ms: Date.now() - start };
}

describe("names in Multus's cache never leave its directory", () => {
  it("deletes no file outside Multus's cache directory whatever the cached interface and network names say", async () => {
    const cid = `${prefix}c1`;
    // A pod asked for this interface; Multus saved its cache before the ADD failed on the name.
    const victim1 = join(base.dir, 'victim1');
    const ifnameAttack = `x/${'../'.repeat(24)}${victim1.slice(1)}`;
    // A NAD whose config names the network so: libcni's record would be <results>/<network>-<container>-<ifname>.
    const victim2 = join(base.dir, `victim2-${cid}-net2`);
    for (const v of [victim1, victim2]) writeFileSync(v, 'keep me');
    const cache = writeMultusCache(cid, [
      { config: { cniVersion: '1.0.0', name: 'hpod', type: 'loopback' } },
      { config: { cniVersion: '1.0.0', name: 'hnet1', type: 'loopback' }, ifnameRequest: ifnameAttack },
      { config: { cniVersion: '1.0.0', name: '../../victim2', type: 'loopback' } },
    ]);
    const out = await runtimeDel(cid);
    assert.ok(existsSync(victim1), 'the file the interface name points at is still there');
    assert.ok(existsSync(victim2), 'the file the network name points at is still there');
    assert.equal(out.code, 0, out.stdout);
    assert.ok(!existsSync(cache), "Multus's cache goes, as Multus's DEL removes it");
    const reports = daemon.stderr.split('\n').filter((l) => l.includes(`"cache":"${cache}"`) && l.includes('refused'));
    for (const what of ['interface', 'network'])
      assert.ok(
        reports.some((l) => l.includes(`its ${what} name`)),
        `the refused ${what} name is reported naming the cache file: ${daemon.stderr}`,
      );
  });
});

describe("names in libcni's records are held to libcni's rules", () => {
  it('reports a record whose interface name libcni would refuse, and neither runs nor removes it', async () => {
    const cid = `${prefix}c2`;
    const ifname = 'a:b';
    const record = join(cacheDir, 'results', `hnet-${cid}-${ifname}`);
    const config = { cniVersion: '1.0.0', name: 'hnet', type: 'loopback' };
    const fields = { kind: 'cniCacheV1', containerId: cid, networkName: 'hnet', ifName: ifname };
    writeFileSync(
      record,
      JSON.stringify({ ...fields, config: Buffer.from(JSON.stringify(config)).toString('base64') }),
    );
    const out = await runtimeDel(cid);
    assert.equal(out.code, 0, out.stdout);
    assert.ok(existsSync(record), 'the record is left where it is');
    assert.match(daemon.stderr, new RegExp(`"cache":"${record}".*its interface name.*refused`));
  });
});

describe('a cache naming Plexus itself is refused, never run', () => {
  /** A sandbox Multus made wrapping Plexus: its delegate is Plexus's conflist, run through `type`. */
  const plexusDelegate = (type: string): Delegate => ({
    config: { cniVersion: '1.0.0', name: 'plexus', plugins: [{ type, socketPath: daemon.socket }] },
  });

  for (const [title, type] of [
    ['its own type', 'plexus-cni'],
    ['another name of its shim', 'plexus-alias'],
  ] as const) {
    it(
      `answers the DEL promptly and lets an ADD of the same container through (${title})`,
      { timeout: 30_000 },
      async () => {
        if (type !== 'plexus-cni' && !existsSync(join(binDir, type)))
          symlinkSync(join(binDir, 'plexus-cni'), join(binDir, type));
        const pod = newPod();
        const cache = writeMultusCache(pod.cid, [plexusDelegate(type)]);
        const del = timed(runtimeDel(pod.cid));
        await new Promise((r) => setTimeout(r, 200));
        const add = timed(podCall(daemon, 'ADD', pod, daemon.runtimeConfig({}, '1.0.0')));
        const [d, a] = await Promise.all([del, add]);
        assert.ok(d.ms < 10_000, `the DEL answered in ${d.ms} ms`);
        assert.ok(a.ms < 10_000, `the ADD answered in ${a.ms} ms`);
        assert.equal(a.value.code, 0, a.value.stdout);
        assert.deepEqual(podLinks(pod.ns), ['eth0']);
        assert.ok(!existsSync(cache));
        assert.match(daemon.stderr, new RegExp(`"cache":"${cache}".*Plexus`));
        assert.equal((await podCall(daemon, 'DEL', pod, daemon.runtimeConfig({}, '1.0.0'))).code, 0);
      },
    );
  }
});

describe("a directory where Multus's cache of a sandbox would be", () => {
  for (const id of ['results', `${prefix}d1`]) {
    it(`is skipped with a log naming it, and the DEL of ${id === 'results' ? '"results"' : 'its container'} succeeds`, async () => {
      const dir = join(cacheDir, id);
      mkdirSync(dir, { recursive: true });
      const out = await runtimeDel(id);
      assert.equal(out.code, 0, out.stdout);
      assert.equal((await runtimeDel(id)).code, 0, 'and again');
      assert.ok(existsSync(dir), 'the directory is left alone');
      assert.match(daemon.stderr, new RegExp(`"cache":"${dir}".*directory`));
    });
  }
});
