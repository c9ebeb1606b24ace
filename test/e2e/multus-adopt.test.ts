/**
 * Pods the real Multus (v4.3.0, thin) made before Plexus served the node: once the runtime calls Plexus, their DEL
 * removes what Multus's ADD took, from Multus's own cache of each sandbox: every host-local lease, the links,
 * Multus's and libcni's cache files. Multus runs as the runtime would run it (exec'd with CNI_* variables), with
 * Debian's reference plugins as its delegates; plexusd is real and gets the DEL through plexus-cni.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podArgs, podMaker, ROOT } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { multusMissing, multusPluginDir, writeRuntimeRecord } from '../support/multus';
import { ip, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const missing = multusMissing();
const prefix = uniquePrefix('ma');
const fx = new NetnsFixture(prefix);
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
const base = new DaemonFixture('podnet');
const binDir = join(base.dir, 'cni-bin');
const cacheDir = join(base.dir, 'multus-cache');
// The runtime's libcni cache: its record of each call to Multus names the network the sandbox was made under.
const runtimeCacheDir = join(base.dir, 'runtime-cni');
const leaseDir = join(base.dir, 'host-local');
const primaryFile = join(base.dir, '10-podnet.conflist');
const uplink = `${prefix}up`;

const primary = {
  cniVersion: '1.0.0',
  name: 'podnet',
  plugins: [
    {
      type: 'bridge',
      bridge: `${prefix}br0`,
      ipam: { type: 'host-local', dataDir: leaseDir, ranges: [[{ subnet: `10.${o}.${t}.0/24` }]] },
    },
  ],
};
const macvlan = {
  cniVersion: '1.0.0',
  name: 'mvnet',
  type: 'macvlan',
  master: uplink,
  mode: 'bridge',
  ipam: { type: 'host-local', dataDir: leaseDir, ranges: [[{ subnet: `10.${o}.${t + 1}.0/24` }]] },
};
const staticNet = {
  cniVersion: '1.0.0',
  name: 'staticnet',
  plugins: [
    {
      type: 'bridge',
      bridge: `${prefix}br1`,
      ipam: { type: 'static', addresses: [{ address: `10.${o}.${t + 2}.5/24` }] },
    },
  ],
};
const multusConf = {
  cniVersion: '1.0.0',
  name: 'multus-cni-network',
  type: 'multus',
  cniDir: cacheDir,
  binDir,
  delegates: [primary, macvlan, staticNet],
};
const daemon = new DaemonFixture(primaryFile, {
  cniBinDir: binDir,
  multusCacheDir: cacheDir,
  runtimeCniCacheDir: runtimeCacheDir,
  logLevel: 'info',
});

restoreForwardingAfterwards();

before(async () => {
  if (missing) return;
  multusPluginDir(binDir);
  writeFileSync(primaryFile, JSON.stringify(primary));
  // The pods' secondary networks as NADs too: Multus falls back on them when its cache of a pod cannot be read.
  for (const conf of [macvlan, staticNet]) {
    daemon.writeNad(
      `${conf.name}.json`,
      JSON.stringify({
        apiVersion: 'k8s.cni.cncf.io/v1',
        kind: 'NetworkAttachmentDefinition',
        metadata: { name: conf.name, namespace: 'default' },
        spec: { config: JSON.stringify(conf) },
      }),
    );
  }
  for (const l of ['br0', 'br1', 'up', 'upp']) fx.trackHostLink(`${prefix}${l}`);
  ip('link', 'add', uplink, 'type', 'veth', 'peer', 'name', `${prefix}upp`);
  ip('link', 'set', uplink, 'up');
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  await base.stop();
  fx.cleanup();
});

const newPod = podMaker(fx, prefix, []);
type Pod = ReturnType<typeof newPod>;

/** Multus's ADD, exec'd as containerd would exec it, and the record containerd's libcni keeps of it. */
function multusAdd(pod: Pod): void {
  const r = spawnSync(join(binDir, 'multus'), [], {
    input: JSON.stringify(multusConf),
    encoding: 'utf8',
    env: {
      PATH: process.env.PATH,
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: pod.cid,
      CNI_NETNS: pod.netns,
      CNI_IFNAME: 'eth0',
      CNI_ARGS: podArgs(pod.name, pod.cid),
      CNI_PATH: binDir,
    },
  });
  assert.equal(r.status, 0, `multus ADD: ${r.stdout} ${r.stderr}`);
  const call = { containerId: pod.cid, ifname: 'eth0', netns: pod.netns, cniArgs: podArgs(pod.name, pod.cid) };
  writeRuntimeRecord(runtimeCacheDir, { ...call, config: multusConf, result: r.stdout });
}
const plexusCheck = (pod: Pod) =>
  daemon.cni({
    command: 'CHECK',
    containerId: pod.cid,
    netns: pod.netns,
    ifname: 'eth0',
    args: podArgs(pod.name, pod.cid),
    config: daemon.runtimeConfig({}, '1.0.0'),
  });
const plexusctl = (...args: string[]): string =>
  execFileSync(join(ROOT, 'bin/plexusctl'), ['--socket', daemon.socket, ...args], { encoding: 'utf8' });
const plexusDel = (pod: Pod, netns = pod.netns) =>
  daemon.cni({
    command: 'DEL',
    containerId: pod.cid,
    netns,
    ifname: 'eth0',
    args: podArgs(pod.name, pod.cid),
    config: daemon.runtimeConfig({}, '1.0.0'),
  });
const leases = (network: string): string[] => {
  try {
    return readdirSync(join(leaseDir, network)).filter((f) => /^\d/.test(f));
  } catch {
    return [];
  }
};
const caches = (): string[] =>
  existsSync(cacheDir)
    ? readdirSync(cacheDir, { recursive: true })
        .map(String)
        .filter((f) => f !== 'results')
    : [];

/** plexusctl's line of a sandbox Multus made: its interfaces, pod, networks and the addresses libcni recorded. */
const adoptedLine = (pod: Pod): RegExp =>
  new RegExp(
    `eth0,net1,net2\\s+default/${pod.name}\\s+podnet,mvnet,staticnet\\s+` +
      `10\\.${o}\\.${t}\\.\\d+/24,10\\.${o}\\.${t + 1}\\.\\d+/24,10\\.${o}\\.${t + 2}\\.5/24\\s+adopted \\(multus\\)`,
  );
/** Multus's caches of sandboxes (not libcni's records under results/). */
const sandboxCaches = (): string[] => caches().filter((c) => !c.startsWith('results'));
/** A CNI GC under `network`, listing `valid` as the runtime's attachments. */
const gc = (network: string, valid: { containerID: string; ifname: string }[]) =>
  daemon.cni({
    command: 'GC',
    config: { ...daemon.runtimeConfig({ 'cni.dev/valid-attachments': valid }, '1.1.0'), name: network },
  });

/** A DEL that answered 0 and left nothing of the pod: links, leases, Multus's and libcni's caches; `said` in the log. */
function assertAllGone(pod: Pod, out: { code: number | null; stdout: string }, said: RegExp): void {
  assert.equal(out.code, 0, out.stdout);
  assert.deepEqual(podLinks(pod.ns), []);
  assert.deepEqual(leases('podnet'), []);
  assert.deepEqual(leases('mvnet'), []);
  assert.deepEqual(caches(), [], "Multus's and libcni's caches are gone");
  assert.match(daemon.stderr, said);
}

describe('a pod Multus made, deleted once Plexus serves the node', { skip: expectedPrerequisites(missing) }, () => {
  it('loses every network Multus gave it: leases, links and caches', async () => {
    const pod = newPod();
    multusAdd(pod);
    assert.deepEqual(podLinks(pod.ns), ['eth0', 'net1', 'net2']);
    assert.equal(leases('podnet').length, 1);
    assert.equal(leases('mvnet').length, 1);
    assert.ok(caches().includes(pod.cid));
    const line = plexusctl('attachments')
      .split('\n')
      .find((l) => l.startsWith(pod.cid));
    assert.match(line ?? '', adoptedLine(pod));
    const checked = await plexusCheck(pod);
    assert.equal(checked.code, 0, `CHECK as Multus would: ${checked.stdout}`);
    ip('-n', pod.ns, 'link', 'set', 'net1', 'down');
    ip('-n', pod.ns, 'addr', 'flush', 'dev', 'net1');
    const broken = await plexusCheck(pod);
    assert.notEqual(broken.code, 0, 'CHECK fails once net1 lost its address');
    assert.match(String(broken.json?.msg), /network mvnet \(net1\)/);
    assertAllGone(pod, await plexusDel(pod), /removed as Multus would have removed it/);
    assert.equal((await plexusDel(pod)).code, 0, 'a repeated DEL succeeds');
  });

  it("deletes a conflist Multus v4.3.0 cached without its plugins' fields with the config libcni recorded at ADD", async () => {
    const pod = newPod();
    multusAdd(pod);
    // Multus v4.3.0 caches a conflist it loaded from a file (its clusterNetwork as a .conflist path) re-encoded
    // through the CNI library's generic types (LoadDelegateNetConfFromConfList): of each plugin, type and ipam.type.
    const cache = join(cacheDir, pod.cid);
    const delegates = JSON.parse(readFileSync(cache, 'utf8')) as { Bytes: string }[];
    const lossy = {
      cniVersion: primary.cniVersion,
      name: primary.name,
      plugins: primary.plugins.map((p) => ({ type: p.type, ipam: { type: p.ipam.type } })),
    };
    delegates[0]!.Bytes = Buffer.from(JSON.stringify(lossy)).toString('base64');
    writeFileSync(cache, JSON.stringify(delegates));
    assert.equal(leases('podnet').length, 1);
    try {
      const out = await plexusDel(pod);
      assert.equal(out.code, 0, out.stdout);
      assert.deepEqual(leases('podnet'), [], "the cluster network's lease is released");
      assert.deepEqual(podLinks(pod.ns), []);
      assert.deepEqual(caches(), []);
      assert.match(daemon.stderr, /differs from libcni's record of its ADD/);
    } finally {
      // A lease this test failed to release would fail the next tests' counts: released by hand.
      for (const l of leases('podnet')) unlinkSync(join(leaseDir, 'podnet', l));
    }
  });

  it("removes a sandbox whose Multus cache went with Multus's own failed DEL, from libcni's records of its networks", async () => {
    const pod = newPod();
    multusAdd(pod);
    // Multus removes its cache after its first DEL attempt whatever the outcome; libcni keeps the record of each
    // network whose DEL failed (here: all of them, as if every plugin had failed).
    unlinkSync(join(cacheDir, pod.cid));
    const line = plexusctl('attachments')
      .split('\n')
      .find((l) => l.startsWith(pod.cid));
    assert.match(line ?? '', adoptedLine(pod));
    try {
      assertAllGone(pod, await plexusDel(pod), /removed from libcni's records of its networks/);
      assert.equal((await plexusDel(pod)).code, 0, 'a repeated DEL succeeds');
    } finally {
      // What a failure here left would fail the next tests' counts: released by hand.
      for (const n of ['podnet', 'mvnet']) for (const l of leases(n)) unlinkSync(join(leaseDir, n, l));
      for (const c of caches()) if (c.includes(pod.cid)) unlinkSync(join(cacheDir, c));
    }
  });

  it("releases the leases when the runtime deleted the netns first (containerd's last DEL)", async () => {
    const pod = newPod();
    multusAdd(pod);
    ip('netns', 'delete', pod.ns);
    const out = await plexusDel(pod, '');
    assert.equal(out.code, 0, out.stdout);
    assert.deepEqual(leases('podnet'), []);
    assert.deepEqual(leases('mvnet'), []);
    assert.deepEqual(caches(), []);
  });

  it("removes on GC the unlisted sandboxes Multus made, under Multus's name or Plexus's, and none under another name", async () => {
    const [kept1, kept2, dropped] = [newPod(), newPod(), newPod()];
    for (const pod of [kept1, kept2, dropped]) multusAdd(pod);
    const listed = [kept1, kept2].map((p) => ({ containerID: p.cid, ifname: 'eth0' }));
    try {
      const made = await gc(multusConf.name, listed);
      assert.equal(made.code, 0, made.stdout);
      assert.deepEqual(podLinks(dropped.ns), [], 'the unlisted sandbox lost its interfaces');
      assert.equal(leases('podnet').length, 2);
      assert.equal(leases('mvnet').length, 2);
      assert.deepEqual(sandboxCaches(), [kept1.cid, kept2.cid].sort());

      // Another network's GC leaves them alone, as it leaves Plexus's own attachments.
      const other = await gc('other-net', []);
      assert.equal(other.code, 0, other.stdout);
      for (const pod of [kept1, kept2]) assert.deepEqual(podLinks(pod.ns), ['eth0', 'net1', 'net2'], pod.cid);
      assert.equal(leases('podnet').length, 2, 'a GC under another name releases none of their leases');
      assert.equal(leases('mvnet').length, 2);
      assert.deepEqual(sandboxCaches(), [kept1.cid, kept2.cid].sort(), "Multus's caches of them stay");

      // Plexus's own name is the one the runtime GCs under once Plexus took Multus's place: it lists every sandbox.
      const own = await gc(String(daemon.runtimeConfig().name), [{ containerID: kept1.cid, ifname: 'eth0' }]);
      assert.equal(own.code, 0, own.stdout);
      assert.deepEqual(podLinks(kept1.ns), ['eth0', 'net1', 'net2'], 'the listed sandbox stays');
      assert.deepEqual(podLinks(kept2.ns), [], "the unlisted one goes under Plexus's name");
      assert.deepEqual(sandboxCaches(), [kept1.cid]);
    } finally {
      for (const pod of [kept1, kept2, dropped]) await plexusDel(pod);
    }
    assert.deepEqual(leases('podnet'), []);
  });

  it('names a delegate whose plugin is gone, still removes the others, and succeeds when retried', async () => {
    const pod = newPod();
    multusAdd(pod);
    unlinkSync(join(binDir, 'macvlan'));
    try {
      const out = await plexusDel(pod);
      assert.notEqual(out.code, 0);
      assert.match(String(out.json?.msg), /network mvnet \(net1\), plugin macvlan: plugin macvlan not found/);
      assert.deepEqual(leases('podnet'), [], 'the other delegates were removed');
      assert.equal(leases('mvnet').length, 1, "the gone plugin's lease stays: nothing can release it");
      assert.equal((await plexusDel(pod)).code, 0, 'the retry succeeds');
    } finally {
      symlinkSync(join(DEBIAN_PLUGINS, 'macvlan'), join(binDir, 'macvlan'));
      // What the missing plugin held: released by hand, as docs/migrate-from-multus.md says.
      for (const l of leases('mvnet')) unlinkSync(join(leaseDir, 'mvnet', l));
    }
  });

  it("falls back on the pod's annotation and the networks as they are now when Multus's cache is truncated, naming the pod and the file", async () => {
    const pod = newPod();
    multusAdd(pod);
    const cache = join(cacheDir, pod.cid);
    const text = readFileSync(cache, 'utf8');
    writeFileSync(cache, text.slice(0, text.length / 2));
    const annotations = { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': 'mvnet, staticnet' } };
    const out = await daemon.cni({
      command: 'DEL',
      containerId: pod.cid,
      netns: pod.netns,
      ifname: 'eth0',
      args: podArgs(pod.name, pod.cid),
      config: daemon.runtimeConfig({ runtimeConfig: annotations }, '1.0.0'),
    });
    assert.equal(out.code, 0, out.stdout);
    assert.match(daemon.stderr, new RegExp(`"pod":"default/${pod.name}".*"cache":"${cache}".*cannot be read`));
    assert.deepEqual(podLinks(pod.ns), []);
    assert.deepEqual(leases('podnet'), []);
    assert.deepEqual(leases('mvnet'), [], "the annotation's networks got the DEL too");
    assert.ok(!existsSync(cache), 'the unreadable cache goes, as Multus removes it');
  });
});
