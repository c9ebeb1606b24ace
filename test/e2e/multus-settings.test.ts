/**
 * Settings carried over from Multus, on a real plexusd and plexus-cni: systemNamespaces (their pods get no
 * defaultNetworks), readinessindicatorfile (no ADD until the cluster network says it is ready), and the takeover
 * (once ready, Multus's config goes aside so the runtime calls Plexus).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { MOVED_ASIDE_SUFFIX } from '../../src/install/multus-takeover';
import { DaemonFixture, podArgs, podMaker } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { NetnsFixture, podLinks, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('mu');
const fx = new NetnsFixture(prefix);
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
const base = new DaemonFixture('podnet');
const ready = join(base.dir, 'cluster-network-ready');
const confDir = join(base.dir, 'net.d');
const multusConf = JSON.stringify({
  cniVersion: '1.0.0',
  name: 'multus-cni-network',
  type: 'multus-shim',
  clusterNetwork: '/etc/cni/net.d/10-podnet.conflist',
});
const daemon = new DaemonFixture('podnet', {
  defaultNetworks: 'sidecar',
  systemNamespaces: 'infra,kube-system',
  readinessIndicatorFile: ready,
  installCniConfig: join(confDir, '00-plexus.conflist'),
  takeOverMultus: true,
});

restoreForwardingAfterwards();

before(async () => {
  mkdirSync(confDir);
  writeFileSync(join(confDir, '00-multus.conf'), multusConf);
  fx.trackHostLink(`${prefix}br0`);
  fx.trackHostLink(`${prefix}br1`);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br0`, subnet: `10.${o}.${t}.0/24` });
  daemon.writeBridgeNetwork({ name: 'sidecar', bridge: `${prefix}br1`, subnet: `10.${o}.${t + 1}.0/24` });
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  await base.stop();
  fx.cleanup();
});

const makePod = podMaker(fx, prefix, ['eth0', 'net1']);
const newPod = (namespace: string) => ({ ...makePod(), namespace });
type Pod = ReturnType<typeof newPod>;
const call = (command: 'ADD' | 'DEL', pod: Pod) =>
  daemon.cni({
    command,
    containerId: pod.cid,
    netns: pod.netns,
    ifname: 'eth0',
    args: podArgs(pod.name, pod.cid, pod.namespace),
    config: daemon.runtimeConfig({}, '1.0.0'),
  });

describe('Multus settings on plexusd', () => {
  it("moves Multus's config aside once ready, so the runtime calls Plexus (takeOverMultus)", () => {
    assert.ok(existsSync(join(confDir, '00-plexus.conflist')));
    assert.ok(!existsSync(join(confDir, '00-multus.conf')));
    assert.equal(readFileSync(join(confDir, `00-multus.conf${MOVED_ASIDE_SUFFIX}`), 'utf8'), multusConf);
  });

  it('answers ADD with 11, naming the file, while the readiness indicator file does not exist', async () => {
    const pod = newPod('default');
    const out = await call('ADD', pod);
    assert.equal(out.code, 1, 'a CNI error exits 1');
    assert.equal(out.json?.code, 11, out.stdout);
    assert.match(String(out.json?.msg), /cluster network is not ready: .*cluster-network-ready does not exist/);
    assert.deepEqual(daemon.journalFiles(), []);
    assert.deepEqual(daemon.leases('podnet'), []);
    assert.equal((await call('DEL', pod)).code, 0);
  });

  it('gives a pod outside the system namespaces its defaultNetworks once the file exists', async () => {
    writeFileSync(ready, '');
    const pod = newPod('default');
    const out = await call('ADD', pod);
    assert.equal(out.code, 0, out.stdout);
    assert.deepEqual(podLinks(pod.ns), ['eth0', 'net1']);
    assert.equal((await call('DEL', pod)).code, 0);
  });

  it('gives a pod of a system namespace no defaultNetworks (systemNamespaces)', async () => {
    const pod = newPod('infra');
    const out = await call('ADD', pod);
    assert.equal(out.code, 0, out.stdout);
    assert.deepEqual(podLinks(pod.ns), ['eth0']);
    assert.equal((await call('DEL', pod)).code, 0);
    assert.deepEqual(daemon.journalFiles(), []);
  });
});
