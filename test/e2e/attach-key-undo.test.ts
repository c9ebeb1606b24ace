/**
 * Undo never deletes what Plexus did not make: a pod interface name its netns already has, or `lo`, is refused before
 * anything is made (code 7), the interface that was there stays, and the sandbox's DEL completes.
 * Real plexusd, real shim, real namespaces.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podArgs, type ShimOutput } from '../support/daemon';
import { ip, NetnsFixture, type TestNetns, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('au');
const fx = new NetnsFixture(prefix);
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
const subnet = (i: number): string => `10.${o}.${t + i}.0/24`;
const daemon = new DaemonFixture('podnet');
const uplink = `${prefix}up`;

function nad(name: string, config: Record<string, unknown>): void {
  daemon.writeNad(
    `${name}.json`,
    JSON.stringify({
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name, namespace: 'default' },
      spec: { config: JSON.stringify({ cniVersion: '1.0.0', name, ...config }) },
    }),
  );
}

before(async () => {
  for (const l of ['b0', 'up', 'upp']) fx.trackHostLink(`${prefix}${l}`);
  ip('link', 'add', uplink, 'type', 'veth', 'peer', 'name', `${prefix}upp`);
  ip('link', 'set', uplink, 'up');
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}b0`, subnet: subnet(0) });
  nad('mv', {
    type: 'macvlan',
    master: uplink,
    mode: 'bridge',
    ipam: { type: 'host-local', ranges: [[{ subnet: subnet(1) }]] },
  });
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
});

let n = 0;
const newPod = (): { cid: string; ns: TestNetns } => {
  n++;
  return { cid: `${prefix}c${n}`, ns: fx.create(`p${n}`) };
};
const call = (command: 'ADD' | 'DEL', pod: { cid: string; ns: TestNetns }, annotation: string): Promise<ShimOutput> =>
  daemon.cni({
    command,
    containerId: pod.cid,
    netns: pod.ns.path,
    ifname: 'eth0',
    args: podArgs(`pod${n}`, pod.cid),
    config: daemon.runtimeConfig({
      runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': annotation } },
    }),
  });
/** `index: name` of a link in a pod's netns, or '' when it is gone. */
const linkOf = (ns: TestNetns, name: string): string =>
  ns
    .exec('ip', '-o', 'link', 'show', name)
    .out.match(/^(\d+): ([^:@]+)/)
    ?.slice(1, 3)
    .join(': ') ?? '';

describe('a pod interface name that is taken', () => {
  it("an interface the netns already has (another plugin's net1) fails the ADD with code 7 and is left alone", async () => {
    const pod = newPod();
    // Another plugin's interface (this kernel has no dummy driver: a bridge stands in).
    assert.equal(pod.ns.exec('ip', 'link', 'add', 'net1', 'type', 'bridge').status, 0);
    const before = linkOf(pod.ns, 'net1');
    const out = await call('ADD', pod, 'mv');
    assert.notEqual(out.code, 0);
    assert.equal(out.json?.code, 7, out.stdout);
    assert.match(String(out.json?.msg), /net1 already exists/);
    assert.equal(linkOf(pod.ns, 'net1'), before, 'the same net1 (same ifindex) is still there');
    assert.equal((await call('DEL', pod, 'mv')).code, 0);
    assert.equal(linkOf(pod.ns, 'net1'), before);
    assert.deepEqual(daemon.leases('mv'), []);
    assert.deepEqual(daemon.journalFiles(), []);
  });

  it('`mv@lo` is refused at planning with code 7, lo is untouched, and the DEL that follows succeeds', async () => {
    const pod = newPod();
    const before = linkOf(pod.ns, 'lo');
    const out = await call('ADD', pod, 'mv@lo');
    assert.equal(out.json?.code, 7, out.stdout);
    assert.match(String(out.json?.msg), /"lo"/);
    const del = await call('DEL', pod, 'mv@lo');
    assert.equal(del.code, 0, del.stdout);
    assert.equal(linkOf(pod.ns, 'lo'), before);
    assert.match(pod.ns.exec('ip', 'link', 'show', 'lo').out, /UP/);
    assert.deepEqual(daemon.journalFiles(), []);
    assert.deepEqual(daemon.leases('mv'), []);
  });
});

describe('recovery of a half-done ADD (the daemon killed before commit)', () => {
  it('deletes the net1 the ADD made, and leaves a net1 someone else made in its place', async () => {
    const made = newPod();
    const replaced = newPod();
    for (const pod of [made, replaced]) assert.equal((await call('ADD', pod, 'mv')).code, 0);
    await daemon.kill('SIGKILL');
    // The crash: both records have every step, and no committed line.
    for (const pod of [made, replaced]) {
      const file = join(daemon.stateDir, 'journal', `${pod.cid}@eth0.jsonl`);
      writeFileSync(
        file,
        readFileSync(file, 'utf8')
          .split('\n')
          .filter((l) => !l.includes('"t":"committed"'))
          .join('\n'),
      );
    }
    // In the second pod, the macvlan is gone and another plugin's net1 took the name (as if the create never happened).
    assert.equal(replaced.ns.exec('ip', 'link', 'del', 'net1').status, 0);
    assert.equal(replaced.ns.exec('ip', 'link', 'add', 'net1', 'type', 'bridge').status, 0);
    const foreign = linkOf(replaced.ns, 'net1');
    await daemon.start();
    assert.equal(linkOf(made.ns, 'net1'), '', 'the macvlan Plexus made is deleted');
    assert.equal(linkOf(replaced.ns, 'net1'), foreign, 'the net1 Plexus did not make stays');
    assert.deepEqual(daemon.journalFiles(), []);
    assert.deepEqual(daemon.leases('mv'), []);
  });
});
