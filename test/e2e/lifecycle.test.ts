/** DEL, CHECK, GC and rollback semantics: nothing leaks, nothing running is unplugged by mistake. */
import assert from 'node:assert/strict';
import { unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import {
  DaemonFixture,
  podCall,
  type PodCallOverrides,
  podMaker,
  type ShimOutput,
  type TestPod,
} from '../support/daemon';
import { hostLinksWithPrefix, ip, ipTry, NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('pl');
const octet = 200 + Math.floor(Math.random() * 50);
const third = Math.floor(Math.random() * 250);
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');

before(async () => {
  fx.trackHostLink(`${prefix}br`);
  fx.trackHostLink(`${prefix}bf`);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br`, subnet: `10.${octet}.${third}.0/24` });
  // A network whose last step fails: the route's gateway is not on any link of the pod.
  daemon.writeBridgeNetwork({
    name: 'badroute',
    bridge: `${prefix}bf`,
    subnet: `10.${octet}.${(third + 1) % 250}.0/24`,
    ipamExtra: { routes: [{ dst: '10.66.0.0/16', gw: '192.0.2.77' }] },
  });
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
});

interface Pod extends TestPod {
  readonly hostVeth: string;
}

const makePod = podMaker(fx, prefix, ['eth0']);
function newPod(): Pod {
  const pod = makePod();
  return { ...pod, hostVeth: hostVethName(pod.cid, 'eth0', 'eth0') };
}

/** A runtime's call for a pod's eth0, with the daemon's runtime config plus `config` (CHECK sends no CNI_ARGS). */
function call(
  command: 'ADD' | 'DEL' | 'CHECK',
  pod: Pod,
  over: PodCallOverrides & { readonly config?: Record<string, unknown> } = {},
): Promise<ShimOutput> {
  const { config, ...request } = over;
  return podCall(
    daemon,
    command,
    pod,
    daemon.runtimeConfig(config),
    command === 'CHECK' ? { ...request, args: null } : request,
  );
}

async function add(pod: Pod, extra: Record<string, unknown> = {}): Promise<string> {
  const out = await call('ADD', pod, { config: extra });
  assert.equal(out.code, 0, out.stdout);
  return String((out.json as { ips: { address: string }[] }).ips[0]?.address);
}

const del = (pod: Pod, netns = pod.netns, cid = pod.cid) => call('DEL', pod, { netns, cid });
const leaseFiles = (): string[] => daemon.leases('podnet');

describe('DEL', () => {
  it('works with an empty CNI_NETNS (containerd RemovePodSandbox) from the journal alone', async () => {
    const pod = newPod();
    const address = await add(pod);
    assert.ok(leaseFiles().includes(address.split('/')[0]!));
    const out = await del(pod, '');
    assert.equal(out.code, 0, out.stdout);
    assert.deepEqual(hostLinksWithPrefix(pod.hostVeth), []);
    assert.ok(!leaseFiles().includes(address.split('/')[0]!), 'the lease is released');
    assert.equal(ipTry('-n', pod.ns, 'link', 'show', 'eth0').status, 1, 'the pod side went with its peer');
  });

  it('works after the pod netns is already gone: the lease, the host veth and the record go', async () => {
    const pod = newPod();
    const address = await add(pod);
    ip('netns', 'del', pod.ns);
    const out = await del(pod);
    assert.equal(out.code, 0, out.stdout);
    assert.deepEqual(hostLinksWithPrefix(pod.hostVeth), []);
    assert.ok(!leaseFiles().includes(address.split('/')[0]!), 'the lease is released');
    assert.deepEqual(
      daemon.journalFiles().filter((f) => f.startsWith(pod.cid)),
      [],
    );
  });

  it('works after a daemon restart', async () => {
    const pod = newPod();
    const address = await add(pod);
    await daemon.kill('SIGTERM');
    await daemon.start();
    const out = await del(pod);
    assert.equal(out.code, 0, out.stdout);
    assert.deepEqual(hostLinksWithPrefix(pod.hostVeth), []);
    assert.ok(!leaseFiles().includes(address.split('/')[0]!));
  });

  it('works after the network definition was deleted', async () => {
    const pod = newPod();
    const address = await add(pod);
    unlinkSync(join(daemon.networksDir, 'podnet.json'));
    try {
      const out = await del(pod);
      assert.equal(out.code, 0, out.stdout);
      assert.deepEqual(hostLinksWithPrefix(pod.hostVeth), []);
      assert.ok(!leaseFiles().includes(address.split('/')[0]!));
    } finally {
      daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br`, subnet: `10.${octet}.${third}.0/24` });
    }
  });

  it('from a stale container ID leaves the running pod alone', async () => {
    const pod = newPod();
    const address = await add(pod);
    const stale = await del(pod, pod.netns, `${pod.cid}old`);
    assert.equal(stale.code, 0, stale.stdout);
    assert.match(ip('-n', pod.ns, 'addr', 'show', 'eth0'), new RegExp(address.replace(/\./g, '\\.')));
    assert.deepEqual(hostLinksWithPrefix(pod.hostVeth), [pod.hostVeth]);
    assert.ok(leaseFiles().includes(address.split('/')[0]!));
    assert.equal((await del(pod)).code, 0);
  });

  it('while the daemon is down is spooled by plexus-cni and replayed when it is back', async () => {
    const pod = newPod();
    const address = await add(pod);
    await daemon.kill('SIGTERM');
    const out = await call('DEL', pod, { config: { daemonWaitSeconds: 0.3 } });
    assert.equal(out.code, 0, `spooled DEL succeeds for the runtime: ${out.stdout}`);
    assert.deepEqual(hostLinksWithPrefix(pod.hostVeth), [pod.hostVeth], 'nothing is removed while the daemon is away');
    await daemon.start();
    assert.deepEqual(hostLinksWithPrefix(pod.hostVeth), [], 'replayed at start-up');
    assert.ok(!leaseFiles().includes(address.split('/')[0]!));
  });
});

describe('ADD', () => {
  it('that fails at its last step undoes everything: no link, no IP, no journal record', async () => {
    const pod = newPod();
    const out = await call('ADD', pod, { config: { defaultNetwork: 'badroute' } });
    assert.equal(out.code, 1, out.stdout);
    assert.equal(out.json?.code, 100);
    assert.match(String(out.json?.msg), /badroute.*10\.66\.0\.0\/16/);
    assert.deepEqual(hostLinksWithPrefix(pod.hostVeth), []);
    assert.deepEqual(daemon.leases('badroute'), []);
    assert.deepEqual(
      daemon.journalFiles().filter((f) => f.startsWith(pod.cid)),
      [],
    );
    assert.equal(ipTry('-n', pod.ns, 'link', 'show', 'eth0').status, 1);
  });

  it('into a netns where the interface name is taken fails and releases the IP it reserved', async () => {
    const pod = newPod();
    ip('-n', pod.ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'x0');
    const before = leaseFiles().length;
    const out = await call('ADD', pod);
    assert.equal(out.code, 1, out.stdout);
    assert.match(String(out.json?.msg), /eth0/);
    assert.equal(leaseFiles().length, before);
    assert.deepEqual(hostLinksWithPrefix(pod.hostVeth), []);
    assert.deepEqual(
      daemon.journalFiles().filter((f) => f.startsWith(pod.cid)),
      [],
    );
  });

  it('repeated for the same container and netns returns the same result without re-plumbing', async () => {
    const pod = newPod();
    const first = await add(pod);
    const second = await add(pod);
    assert.equal(second, first);
    assert.equal(leaseFiles().filter((f) => f === first.split('/')[0]).length, 1);
    assert.equal((await del(pod)).code, 0);
  });

  it('reports the MACs the kernel has, on the host veth and in the pod', async () => {
    const pod = newPod();
    const out = await call('ADD', pod);
    assert.equal(out.code, 0, out.stdout);
    const r = out.json as { interfaces: { name: string; mac?: string; sandbox?: string }[] };
    const macOf = (args: string[]): string => /link\/ether ([0-9a-f:]{17})/.exec(ip(...args))?.[1] ?? 'none';
    assert.equal(r.interfaces.find((i) => i.name === pod.hostVeth)?.mac, macOf(['link', 'show', 'dev', pod.hostVeth]));
    assert.equal(r.interfaces.find((i) => i.sandbox)?.mac, macOf(['-n', pod.ns, 'link', 'show', 'dev', 'eth0']));
    assert.equal((await del(pod)).code, 0);
  });

  it('honours a static IP and MAC from CNI_ARGS (podman style)', async () => {
    const pod = newPod();
    const wanted = `10.${octet}.${third}.200`;
    const out = await call('ADD', pod, { args: `IgnoreUnknown=1;IP=${wanted};MAC=02:11:22:33:44:55` });
    assert.equal(out.code, 0, out.stdout);
    const r = out.json as { ips: { address: string }[]; interfaces: { name: string; mac: string; sandbox?: string }[] };
    assert.equal(r.ips[0]?.address, `${wanted}/24`);
    assert.equal(r.interfaces.find((i) => i.sandbox)?.mac, '02:11:22:33:44:55');
    assert.equal((await del(pod)).code, 0);
  });

  it('honours runtimeConfig ips with capitalised keys (containerd)', async () => {
    const pod = newPod();
    const wanted = `10.${octet}.${third}.201/24`;
    const out = await call('ADD', pod, { config: { runtimeConfig: { IPs: [wanted] } } });
    assert.equal(out.code, 0, out.stdout);
    assert.equal((out.json as { ips: { address: string }[] }).ips[0]?.address, wanted);
    assert.equal((await del(pod)).code, 0);
  });
});

describe('CHECK', () => {
  it("detects an address removed behind the daemon's back", async () => {
    const pod = newPod();
    const address = await add(pod);
    ip('-n', pod.ns, 'addr', 'del', address, 'dev', 'eth0');
    const out = await call('CHECK', pod);
    assert.equal(out.code, 1);
    assert.match(String(out.json?.msg), new RegExp(`address ${address.replace(/\./g, '\\.')} is missing on eth0`));
    assert.equal((await del(pod)).code, 0);
  });

  it('detects a removed default route', async () => {
    const pod = newPod();
    await add(pod);
    ip('-n', pod.ns, 'route', 'del', 'default');
    const out = await call('CHECK', pod);
    assert.equal(out.code, 1);
    assert.match(String(out.json?.msg), /route 0\.0\.0\.0\/0 via .* is missing/);
    assert.equal((await del(pod)).code, 0);
  });

  it('detects a removed host veth', async () => {
    const pod = newPod();
    await add(pod);
    // The pod's eth0 goes with its peer; CHECK must name the host side too, which is what an operator looks for.
    ip('link', 'del', pod.hostVeth);
    const out = await call('CHECK', pod);
    assert.equal(out.code, 1);
    assert.match(String(out.json?.msg), new RegExp(`host interface ${pod.hostVeth} is missing`));
    assert.equal((await del(pod)).code, 0);
  });

  it('of an unknown container answers code 3', async () => {
    const pod = newPod();
    const out = await call('CHECK', pod);
    assert.equal(out.json?.code, 3);
  });
});

describe('GC', () => {
  it('removes attachments missing from cni.dev/valid-attachments and keeps the listed ones', async () => {
    const keep = newPod();
    const drop = newPod();
    const keepIp = await add(keep);
    const dropIp = await add(drop);
    const out = await daemon.cni({
      command: 'GC',
      config: daemon.runtimeConfig({ 'cni.dev/valid-attachments': [{ containerID: keep.cid, ifname: 'eth0' }] }),
    });
    assert.equal(out.code, 0, out.stdout);
    assert.deepEqual(hostLinksWithPrefix(drop.hostVeth), []);
    assert.deepEqual(hostLinksWithPrefix(keep.hostVeth), [keep.hostVeth]);
    assert.ok(!leaseFiles().includes(dropIp.split('/')[0]!));
    assert.ok(leaseFiles().includes(keepIp.split('/')[0]!));
    assert.equal((await del(keep)).code, 0);
  });

  it('accepts the older cni.dev/attachments key', async () => {
    const drop = newPod();
    await add(drop);
    const out = await daemon.cni({ command: 'GC', config: daemon.runtimeConfig({ 'cni.dev/attachments': [] }) });
    assert.equal(out.code, 0, out.stdout);
    assert.deepEqual(hostLinksWithPrefix(drop.hostVeth), []);
  });

  it('leaves nothing behind once every pod is gone', () => {
    assert.deepEqual(leaseFiles(), []);
    assert.deepEqual(daemon.journalFiles(), []);
  });
});
