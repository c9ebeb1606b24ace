/**
 * plexusd with --kubeconfig on a real API server: a pod gets the networks the API defines (its NAD directory is empty),
 * through the real shim on real namespaces; a pod rejected for a NAD that does not exist yet succeeds when the runtime
 * retries after the NAD was created.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podCall, podMaker } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { ip, NetnsFixture, uniquePrefix } from '../support/netns';

const skip = k8sMissing();
const prefix = uniquePrefix('pa');
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
const bridgeConfig = (name: string, i: number): string =>
  JSON.stringify({ cniVersion: '1.0.0', name, type: 'bridge', bridge: `${prefix}b${i}`, isGateway: true, ipam: { type: 'host-local', ranges: [[{ subnet: `10.${o}.${t + i}.0/24` }]] } });

describe('plexusd reading NADs from the Kubernetes API', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  let api: KubeApiFixture;
  let daemon: DaemonFixture;
  const newPod = podMaker(fx, prefix, ['eth0', 'net1']);
  const withNetworks = (annotation: string): Record<string, unknown> =>
    daemon.runtimeConfig({ runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': annotation } } }, '1.0.0');
  restoreForwardingAfterwards();

  before(async () => {
    for (let i = 0; i < 3; i++) fx.trackHostLink(`${prefix}b${i}`);
    api = await KubeApiFixture.start();
    await api.installNadCrd();
    assert.equal((await api.createNad('default', 'podnet', bridgeConfig('podnet', 0))).status, 201);
    assert.equal((await api.createNad('default', 'sec', bridgeConfig('sec', 1))).status, 201);
    daemon = new DaemonFixture('podnet', ['--kubeconfig', api.kubeconfig]);
    await daemon.start();
  });
  after(async () => {
    await daemon?.stop();
    await api?.stop();
    fx.cleanup();
  });

  it('attaches the default network and a selected one, both defined only in the API, and DEL removes them', async () => {
    const pod = newPod();
    const out = await podCall(daemon, 'ADD', pod, withNetworks('sec'));
    assert.equal(out.code, 0, out.stdout);
    assert.match(ip('-n', pod.ns, '-o', '-4', 'addr', 'show', 'eth0'), new RegExp(`inet 10\\.${o}\\.${t}\\.`));
    assert.match(ip('-n', pod.ns, '-o', '-4', 'addr', 'show', 'net1'), new RegExp(`inet 10\\.${o}\\.${t + 1}\\.`));
    assert.equal((await podCall(daemon, 'DEL', pod, withNetworks('sec'))).code, 0);
    assert.deepEqual([...daemon.leases('podnet'), ...daemon.leases('sec')], []);
  });

  it('writes the pod\'s network-status annotation: every interface with the IPs and MAC its netns has, the default marked', async () => {
    const made = await api.createPod('default', 'web');
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const uid = (made.body as { metadata: { uid: string } }).metadata.uid;
    const pod = newPod();
    const args = `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=${pod.cid};K8S_POD_UID=${uid}`;
    const out = await daemon.cni({ command: 'ADD', containerId: pod.cid, netns: pod.netns, ifname: 'eth0', args, config: withNetworks('sec') });
    assert.equal(out.code, 0, out.stdout);
    const inNetns = (ifname: string): { ip: string; mac: string } => ({
      ip: /inet (\S+)\//.exec(ip('-n', pod.ns, '-o', '-4', 'addr', 'show', ifname))![1]!,
      mac: /link\/ether (\S+)/.exec(ip('-n', pod.ns, '-o', 'link', 'show', ifname))![1]!,
    });
    let status: { name: string; interface: string; ips: string[]; mac: string; default: boolean }[] = [];
    for (let i = 0; i < 100 && status.length === 0; i++) {
      const got = await api.request('GET', '/api/v1/namespaces/default/pods/web');
      const text = (got.body as { metadata: { annotations?: Record<string, string> } }).metadata.annotations?.['k8s.v1.cni.cncf.io/network-status'];
      if (text) status = JSON.parse(text);
      else await new Promise((r) => setTimeout(r, 50));
    }
    assert.deepEqual(status.map((s) => [s.name, s.interface, s.default]), [['default/podnet', 'eth0', true], ['default/sec', 'net1', false]]);
    for (const s of status) {
      const actual = inNetns(s.interface);
      assert.deepEqual(s.ips, [actual.ip], `${s.interface}'s IPs`);
      assert.equal(s.mac, actual.mac, `${s.interface}'s MAC`);
    }
    assert.equal((await daemon.cni({ command: 'DEL', containerId: pod.cid, netns: pod.netns, ifname: 'eth0', args, config: withNetworks('sec') })).code, 0);
  });

  it('rejects a pod whose NAD does not exist yet, naming it, and attaches it when the runtime retries after the NAD was created', async () => {
    const pod = newPod();
    const rejected = await podCall(daemon, 'ADD', pod, withNetworks('late'));
    assert.equal(rejected.json?.code, 7, rejected.stdout);
    assert.match(String(rejected.json?.msg), /network default\/late is not defined: there is no such NetworkAttachmentDefinition in the API/);
    assert.equal((await podCall(daemon, 'DEL', pod, withNetworks('late'))).code, 0, 'the runtime cleans up the failed sandbox');
    assert.equal((await api.createNad('default', 'late', bridgeConfig('late', 2))).status, 201);
    let retried = await podCall(daemon, 'ADD', pod, withNetworks('late'));
    for (let i = 0; retried.code !== 0 && i < 50; i++) {
      // The runtime retries the sandbox; the informer hears of the new NAD within a moment.
      await new Promise((r) => setTimeout(r, 100));
      retried = await podCall(daemon, 'ADD', pod, withNetworks('late'));
    }
    assert.equal(retried.code, 0, retried.stdout);
    assert.match(ip('-n', pod.ns, '-o', '-4', 'addr', 'show', 'net1'), new RegExp(`inet 10\\.${o}\\.${t + 2}\\.`));
    assert.equal((await podCall(daemon, 'DEL', pod, withNetworks('late'))).code, 0);
  });
});
