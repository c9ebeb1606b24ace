/**
 * The engine's transactions as pure logic: the real plan, drivers, journal and IPAM (in a temporary directory) on an
 * in-memory kernel, so these run in milliseconds and without root. The same behaviours are proven on real namespaces
 * by test/e2e; these pin the engine's own rules (order, tags, rollback, recovery, lease ownership).
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { cniCall, engineBed, type EngineBed } from '../support/engine-bed';

let bed: EngineBed;
beforeEach(async () => {
  bed = await engineBed();
});
afterEach(() => bed.remove());

const pod = (name: string): string => bed.pod(name);
const request = cniCall;
const leases = (): Promise<string[]> => bed.leases();

describe('the engine on an in-memory kernel', () => {
  it('ADD attaches every network in plan order, tags every journaled step with its attachment, and commits the merged result', async () => {
    const netns = pod('a');
    const r = await bed.engine.add(request('ADD', 'ca', netns));
    assert.ok(r.ok, !r.ok ? r.error.message : '');
    assert.deepEqual(bed.kernel.links(netns), ['eth0', 'net1', 'net2']);
    assert.deepEqual(
      r.value.interfaces.filter((i) => i.sandbox).map((i) => i.name),
      ['eth0', 'net1', 'net2'],
    );
    assert.deepEqual(await leases(), ['blue ca eth0:net1', 'podnet ca eth0:eth0', 'red ca eth0:net2']);
    const record = await bed.journal.load('ca', 'eth0');
    assert.deepEqual(
      [...new Set(record!.undoOwners.map((o) => `${o?.network} ${o?.ifname}`))],
      ['default/podnet eth0', 'default/blue net1', 'default/red net2'],
    );
    assert.deepEqual(record!.result, r.value);
  });

  it('a failure in the third attachment undoes the first two, newest first, and releases their leases', async () => {
    const netns = pod('b');
    bed.kernel.failWhen((e) => e.op.op === 'linkAdd' && e.op.link.kind === 'veth' && e.op.link.peer.name === 'net2');
    const r = await bed.engine.add(request('ADD', 'cb', netns));
    assert.ok(!r.ok);
    assert.equal(r.error.code, 100);
    assert.match(r.error.message, /attaching network default\/red as net2/);
    assert.deepEqual(bed.kernel.links(netns), []);
    assert.deepEqual(
      bed.kernel.links().filter((l) => l.startsWith('veth')),
      [],
    );
    assert.deepEqual(await leases(), []);
    assert.equal(await bed.journal.load('cb', 'eth0'), undefined);
    const deleted = bed.kernel.log.filter((e) => e.op.op === 'linkDel').map((e) => (e.op as { name: string }).name);
    // net2's deletion was journaled before its creation was tried (journal first), so undo repeats it: gone is fine.
    assert.deepEqual(
      deleted,
      [hostVethName('cb', 'eth0', 'net2'), hostVethName('cb', 'eth0', 'net1'), hostVethName('cb', 'eth0', 'eth0')],
      'the host veths, newest first',
    );
  });

  it('DEL undoes everything; a second DEL of what is gone succeeds', async () => {
    const netns = pod('c');
    assert.ok((await bed.engine.add(request('ADD', 'cc', netns))).ok);
    assert.ok((await bed.engine.del(request('DEL', 'cc', netns))).ok);
    assert.deepEqual(
      bed.kernel.links().filter((l) => l.startsWith('veth')),
      [],
    );
    assert.deepEqual(await leases(), []);
    assert.deepEqual(await bed.journal.list(), []);
    assert.ok((await bed.engine.del(request('DEL', 'cc', netns))).ok);
  });

  it("a runtime's repeated DEL of a sandbox the engine removed answers without reading the other records", async () => {
    for (const cid of ['co1', 'co2', 'co3']) assert.ok((await bed.engine.add(request('ADD', cid, pod(cid)))).ok);
    assert.ok((await bed.engine.del(request('DEL', 'co1', pod('co1')))).ok);
    // containerd sends a sandbox's DEL again (StopPodSandbox, then RemovePodSandbox): each must stay O(1), not a
    // read of every record on the node.
    let listed = 0;
    const list = bed.journal.list.bind(bed.journal);
    bed.journal.list = () => {
      listed++;
      return list();
    };
    assert.ok((await bed.engine.del(request('DEL', 'co1', pod('co1')))).ok);
    assert.equal(listed, 0, 'journal.list() calls for a repeated DEL');
    // A DEL of a sandbox never seen still looks for the pod under another container ID (a stale DEL is logged).
    assert.ok((await bed.engine.del(request('DEL', 'co9', pod('co9')))).ok);
    assert.equal(listed, 1);
    assert.equal((await list()).length, 2, 'the other two pods keep their records');
  });

  it('a replayed ADD answers the stored result and makes nothing twice; the same container in another netns is refused', async () => {
    const netns = pod('d');
    const first = await bed.engine.add(request('ADD', 'cd', netns));
    const opsAfterFirst = bed.kernel.log.length;
    const again = await bed.engine.add(request('ADD', 'cd', netns));
    assert.ok(first.ok && again.ok);
    assert.deepEqual(again.value, first.value);
    assert.equal(bed.kernel.log.length, opsAfterFirst, 'no kernel operation for the replay');
    const elsewhere = await bed.engine.add(request('ADD', 'cd', pod('d2')));
    assert.ok(!elsewhere.ok && elsewhere.error.code === 4 && /already has eth0 attached/.test(elsewhere.error.message));
  });

  it('one container ADDed under eth0 and eth1 gets a lease per attachment; DEL of one releases only its own', async () => {
    const [a, b] = [pod('k1'), pod('k2')];
    assert.ok((await bed.engine.add(request('ADD', 'ck', a))).ok);
    const second = await bed.engine.add({ ...request('ADD', 'ck', b), ifname: 'eth1' });
    assert.ok(second.ok, !second.ok ? second.error.message : '');
    assert.deepEqual(
      (await leases()).filter((l) => l.startsWith('blue')),
      ['blue ck eth0:net1', 'blue ck eth1:net1'],
    );
    assert.ok((await bed.engine.del({ ...request('DEL', 'ck', b), ifname: 'eth1' })).ok);
    assert.deepEqual(await leases(), ['blue ck eth0:net1', 'podnet ck eth0:eth0', 'red ck eth0:net2']);
    assert.deepEqual(bed.kernel.links(a), ['eth0', 'net1', 'net2']);
  });

  it('a record and lease of an older plexusd (owner: the bare pod interface) are held, then released by its DEL', async () => {
    const netns = pod('old');
    const config = { type: 'host-local', ranges: [[{ subnet: '10.9.1.0/24' }]] } as never;
    const entry = await bed.journal.begin({
      containerId: 'co',
      ifname: 'eth0',
      netns,
      pod: {},
      cniNetwork: 'plexus',
      networks: ['default/blue'],
      startedAt: new Date().toISOString(),
    });
    await entry.record(
      { kind: 'releaseIpam', network: 'blue', containerId: 'co', ifname: 'net1' },
      { network: 'default/blue', ifname: 'net1' },
    );
    const old = await bed.ipam.allocate({ network: 'blue', containerId: 'co', ifname: 'net1', config });
    assert.ok(old.ok);
    await entry.commit({ cniVersion: '1.0.0', interfaces: [], ips: [], routes: [] } as never, '1.0.0');
    await entry.close();
    // The same container under another CNI_IFNAME, by this plexusd: its own lease, in the new format.
    assert.ok((await bed.engine.add({ ...request('ADD', 'co', pod('new')), ifname: 'eth1' })).ok);
    assert.deepEqual(await bed.engine.releaseOrphanedLeases(), [], 'every lease is held by its record');
    assert.ok((await bed.engine.del(request('DEL', 'co', netns))).ok);
    assert.deepEqual(
      (await leases()).filter((l) => l.startsWith('blue')),
      ['blue co eth1:net1'],
      'the old lease is released, the new one kept',
    );
  });

  it('a repeated ADD of a committed container and interface that asks for other networks is refused with code 4', async () => {
    const netns = pod('r');
    const first = await bed.engine.add(request('ADD', 'cr', netns, 'blue, red'));
    assert.ok(first.ok);
    const ops = bed.kernel.log.length;
    const other = await bed.engine.add(request('ADD', 'cr', netns, 'blue'));
    assert.ok(!other.ok);
    assert.equal(other.error.code, 4);
    assert.match(other.error.message, /CNI_CONTAINERID cr with CNI_IFNAME eth0 is attached already, to other networks/);
    assert.match(
      other.error.details,
      /attached \(runtime network plexus\): default\/podnet as eth0, default\/blue as net1, default\/red as net2; asked: default\/podnet as eth0, default\/blue as net1/,
    );
    assert.equal(bed.kernel.log.length, ops, 'nothing was touched');
    const retry = await bed.engine.add(request('ADD', 'cr', netns, 'blue, red'));
    assert.ok(retry.ok && first.ok);
    assert.deepEqual(retry.value, first.value, 'the same ADD again is a retry: the stored answer');
  });

  it('a pod interface name the netns already has is refused with code 7 before anything is recorded or made', async () => {
    const netns = pod('t');
    await bed.kernel.batch(netns, [{ op: 'linkAdd', link: { kind: 'bridge', name: 'net2' } }]);
    const r = await bed.engine.add(request('ADD', 'ct', netns));
    assert.ok(!r.ok);
    assert.equal(r.error.code, 7);
    assert.match(r.error.message, /^interface net2 already exists in /);
    assert.deepEqual(bed.kernel.links(netns), ['net2']);
    assert.deepEqual(await leases(), []);
    assert.deepEqual(await bed.journal.list(), []);
  });

  it('after a crash before commit, undoUnfinished removes what the cut-off ADD made', async () => {
    const netns = pod('e');
    assert.ok((await bed.engine.add(request('ADD', 'ce', netns))).ok);
    // The crash: the record has every step, but no committed line.
    const file = join(bed.dir, 'journal', 'ce@eth0.jsonl');
    writeFileSync(
      file,
      readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => !l.includes('"t":"committed"'))
        .join('\n'),
    );
    const { undone, failed } = await bed.engine.undoUnfinished();
    assert.deepEqual([undone.length, failed.length], [1, 0]);
    assert.deepEqual(bed.kernel.links(netns), []);
    assert.deepEqual(await leases(), []);
  });

  it('releaseOrphanedLeases keeps every lease a record holds, secondary networks included, and releases the rest', async () => {
    const netns = pod('f');
    assert.ok((await bed.engine.add(request('ADD', 'cf', netns))).ok);
    const held = await leases();
    await bed.ipam.allocate({
      network: 'blue',
      containerId: 'gone',
      ifname: 'net1',
      config: { type: 'host-local', ranges: [[{ subnet: '10.9.1.0/24' }]] } as never,
      requestedIps: [],
    });
    assert.deepEqual(
      await bed.engine.releaseOrphanedLeases({ dryRun: true }).then((l) => l.map((x) => x.containerId)),
      ['gone'],
      'the dry run lists it',
    );
    const released = await bed.engine.releaseOrphanedLeases();
    assert.deepEqual(
      released.map((l) => `${l.network} ${l.containerId} ${l.ifname}`),
      ['blue gone net1'],
    );
    assert.deepEqual(await leases(), held);
  });

  it("tells the status sink what the pod's networks became after ADD, a detach and DEL; a sink that throws fails nothing", async () => {
    const told: string[] = [];
    const sink = {
      attached: (pod: { name?: string }, cid: string, status: readonly { name: string; interface?: string }[]) =>
        told.push(`attached ${pod.name} ${cid} ${status.map((s) => `${s.name}@${s.interface}`).join(',')}`),
      detached: (pod: { name?: string }, cid: string) => told.push(`detached ${pod.name} ${cid}`),
      failed: (pod: { name?: string }, cid: string, e: { code: number }) =>
        told.push(`failed ${pod.name} ${cid} ${e.code}`),
    };
    const engine = bed.engineWith({ ports: { statusSink: sink } });
    const netns = pod('s');
    assert.ok((await engine.add(request('ADD', 'cs', netns))).ok);
    assert.ok((await engine.detachAttachment('cs', 'eth0', { network: 'default/red', ifname: 'net2' })).ok);
    assert.ok((await engine.del(request('DEL', 'cs', netns))).ok);
    assert.ok(!(await engine.add(request('ADD', 'cf', '/nonexistent/netns'))).ok, 'an ADD into a missing netns fails');
    assert.deepEqual(told, [
      'attached cs cs default/podnet@eth0,default/blue@net1,default/red@net2',
      'attached cs cs default/podnet@eth0,default/blue@net1',
      'detached cs cs',
      'failed cf cf 4',
    ]);

    const throwing = bed.engineWith({
      ports: {
        statusSink: {
          attached: () => {
            throw new Error('API down');
          },
          detached: () => undefined,
          failed: () => undefined,
        },
      },
    });
    const r = await throwing.add(request('ADD', 'ct', pod('t')));
    assert.ok(r.ok, 'the pod is attached even when the sink fails');
  });

  it('refuses a pod over the per-pod limits, naming them, before anything is made', async () => {
    const engine = bed.engineWith({ settings: { limits: { interfacesPerPod: 2, annotationBytes: 64 } } });
    const netns = pod('l');
    const many = await engine.add(request('ADD', 'cl', netns));
    assert.ok(!many.ok && many.error.code === 7);
    assert.match(
      many.error.message,
      /the pod asks for 3 interfaces \(the default network, 0 from defaultNetworks, 2 selected\), more than this node allows \(--max-interfaces-per-pod 2\)/,
    );
    const long = await engine.add(request('ADD', 'cl', netns, `blue@${'x'.repeat(70)}`));
    assert.ok(
      !long.ok && /is 75 bytes, more than this node allows \(--max-annotation-bytes 64\)/.test(long.error.message),
      !long.ok ? long.error.message : '',
    );
    assert.deepEqual(bed.kernel.log, [], 'nothing reached the kernel');
    assert.ok((await engine.add(request('ADD', 'cl', netns, 'blue'))).ok, 'within the limits');
  });

  it('holds at most --max-node-attachments pod interfaces; DEL, detach and a rollback give theirs back; a new engine counts the journal', async () => {
    const engine = bed.engineWith({ settings: { maxNodeAttachments: 5 } });
    assert.ok((await engine.add(request('ADD', 'n1', pod('n1')))).ok, '3 of 5');
    const refused = await engine.add(request('ADD', 'n2', pod('n2')));
    assert.ok(!refused.ok && refused.error.code === 11);
    assert.match(
      refused.error.message,
      /this node holds 3 pod interfaces; 3 more would pass its limit \(--max-node-attachments 5\)/,
    );
    bed.kernel.failWhen((e) => e.op.op === 'linkAdd' && e.op.link.kind === 'veth' && e.op.link.peer.name === 'net1');
    assert.ok(!(await engine.add(request('ADD', 'n3', pod('n3'), 'blue'))).ok, 'a rolled-back ADD of 2');
    assert.ok((await engine.add(request('ADD', 'n4', pod('n4'), 'blue'))).ok, 'its 2 were given back: 5 of 5');
    assert.ok((await engine.detachAttachment('n1', 'eth0', { network: 'default/red', ifname: 'net2' })).ok);
    assert.ok((await engine.add(request('ADD', 'n5', pod('n5'), ''))).ok, 'the detached one was given back');
    const restarted = bed.engineWith({ settings: { maxNodeAttachments: 5 } });
    const full = await restarted.add(request('ADD', 'n6', pod('n6'), ''));
    assert.ok(
      !full.ok && /holds 5 pod interfaces/.test(full.error.message),
      'a new engine counts what the journal holds',
    );
    assert.ok((await restarted.del(request('DEL', 'n4', bed.pod('n4')))).ok);
    assert.ok((await restarted.add(request('ADD', 'n6', pod('n6b'), ''))).ok, 'DEL gave 2 back');
  });

  it('CHECK fails naming an interface that went missing', async () => {
    const netns = pod('g');
    assert.ok((await bed.engine.add(request('ADD', 'cg', netns))).ok);
    assert.ok((await bed.engine.check(request('CHECK', 'cg', netns))).ok);
    await bed.kernel.deleteLink(netns, 'net1');
    const r = await bed.engine.check(request('CHECK', 'cg', netns));
    assert.ok(!r.ok && /interface net1 is missing/.test(r.error.message), !r.ok ? r.error.message : 'passed');
  });

  it("CHECK hands a driver the network's config as defined now (a bridge no longer as promiscMode says fails)", async () => {
    const netns = pod('gp');
    assert.ok((await bed.engine.add(request('ADD', 'cgp', netns))).ok);
    const file = join(bed.dir, 'networks', 'podnet.json');
    const nad = JSON.parse(readFileSync(file, 'utf8')) as { spec: { config: string } };
    const config = { ...(JSON.parse(nad.spec.config) as Record<string, unknown>), promiscMode: true };
    writeFileSync(file, JSON.stringify({ ...nad, spec: { config: JSON.stringify(config) } }));
    const r = await bed.engine.check(request('CHECK', 'cgp', netns));
    assert.ok(!r.ok && /promiscMode is true/.test(r.error.message), !r.ok ? r.error.message : 'passed');
  });

  describe('hot-plug: changeNetworks', () => {
    const networks = (text: string): Record<string, string> => ({ 'k8s.v1.cni.cncf.io/networks': text });

    it('adds and removes networks of a running pod, keeping the untouched interface, leases following', async () => {
      const netns = pod('h1');
      assert.ok((await bed.engine.add(request('ADD', 'h1', netns, 'blue, red'))).ok);
      const r = await bed.engine.changeNetworks('h1', 'eth0', networks('red'));
      assert.ok(r.ok, r.ok ? '' : r.error.message);
      assert.deepEqual(r.value.removed, [{ network: 'default/blue', ifname: 'net1' }]);
      assert.deepEqual(bed.kernel.links(netns), ['eth0', 'net2'], 'red keeps net2');
      assert.deepEqual(await leases(), ['podnet h1 eth0:eth0', 'red h1 eth0:net2']);
      const again = await bed.engine.changeNetworks('h1', 'eth0', networks('red, blue'));
      assert.ok(again.ok);
      assert.deepEqual(again.value.added, [{ network: 'default/blue', ifname: 'net1' }], 'the next free name');
      assert.deepEqual(bed.kernel.links(netns), ['eth0', 'net1', 'net2']);
      const record = await bed.journal.load('h1', 'eth0');
      assert.deepEqual(
        record!.details!.networkStatus.map((s) => `${s.name}@${s.interface}`),
        ['default/podnet@eth0', 'default/red@net2', 'default/blue@net1'],
      );
      const same = await bed.engine.changeNetworks('h1', 'eth0', networks('red, blue'));
      assert.ok(same.ok && same.value.added.length === 0 && same.value.removed.length === 0, 'no change, nothing done');
      assert.ok((await bed.engine.del(request('DEL', 'h1', netns))).ok);
      assert.deepEqual(await leases(), []);
      assert.deepEqual(
        bed.kernel.links().filter((l) => l.startsWith('veth')),
        [],
      );
    });

    it("refuses with code 7 a network whose interface name the running pod's netns already has, changing nothing", async () => {
      const netns = pod('h9');
      assert.ok((await bed.engine.add(request('ADD', 'h9', netns, 'blue'))).ok);
      await bed.kernel.batch(netns, [{ op: 'linkAdd', link: { kind: 'bridge', name: 'net2' } }]);
      const before = await bed.journal.load('h9', 'eth0');
      const r = await bed.engine.changeNetworks('h9', 'eth0', networks('blue, red'));
      assert.ok(!r.ok);
      assert.equal(r.error.code, 7);
      assert.match(r.error.message, /^interface net2 already exists in /);
      assert.deepEqual(bed.kernel.links(netns), ['eth0', 'net1', 'net2']);
      assert.deepEqual(await bed.journal.load('h9', 'eth0'), before);
    });

    it('leaves the pod exactly as it was when an addition fails or the annotation is invalid', async () => {
      const netns = pod('h2');
      assert.ok((await bed.engine.add(request('ADD', 'h2', netns, 'blue'))).ok);
      const before = await bed.journal.load('h2', 'eth0');
      bed.kernel.failWhen((e) => e.op.op === 'linkAdd' && e.op.link.kind === 'veth' && e.op.link.peer.name === 'net2');
      const failed = await bed.engine.changeNetworks('h2', 'eth0', networks('red'));
      assert.ok(
        !failed.ok && /attaching network default\/red as net2/.test(failed.error.message),
        failed.ok ? '' : failed.error.message,
      );
      assert.deepEqual(bed.kernel.links(netns), ['eth0', 'net1'], 'blue was not removed: additions come first');
      assert.deepEqual(await leases(), ['blue h2 eth0:net1', 'podnet h2 eth0:eth0']);
      const after = await bed.journal.load('h2', 'eth0');
      assert.deepEqual(after!.details, before!.details);
      assert.equal(after!.changing, undefined);
      const invalid = await bed.engine.changeNetworks('h2', 'eth0', networks('nope'));
      assert.ok(!invalid.ok && invalid.error.code === 7);
      assert.deepEqual(bed.kernel.links(netns), ['eth0', 'net1']);
      const defaultGone = await bed.engine.changeNetworks('h2', 'eth0', networks(''));
      assert.ok(defaultGone.ok);
      assert.deepEqual(bed.kernel.links(netns), ['eth0'], 'the default network stays');
    });

    it('after a crash while adding, recovery undoes the change: the pod is as it was', async () => {
      const netns = pod('h3');
      assert.ok((await bed.engine.add(request('ADD', 'h3', netns, 'blue'))).ok);
      // The daemon "dies" inside the kernel call that creates red's veth: the change's lines stay open in the journal.
      const batch = bed.kernel.batch.bind(bed.kernel);
      bed.kernel.batch = async (ns: string | undefined, ops: readonly { op: string; link?: { kind?: string } }[]) => {
        if (ops.some((o) => o.op === 'linkAdd' && o.link?.kind === 'veth') && bed.kernel.links(netns).length === 2)
          throw new Error('the daemon died here');
        return batch(ns, ops as never);
      };
      await assert.rejects(bed.engine.changeNetworks('h3', 'eth0', networks('red')), /the daemon died here/);
      bed.kernel.batch = batch;
      assert.ok((await bed.journal.load('h3', 'eth0'))!.changing, 'the change is open');
      assert.equal((await bed.engine.undoUnfinished()).failed.length, 0);
      const record = await bed.journal.load('h3', 'eth0');
      assert.equal(record!.changing, undefined);
      assert.deepEqual(
        record!.details!.attachments.map((a) => `${a.network}@${a.ifname}`),
        ['default/podnet@eth0', 'default/blue@net1'],
      );
      assert.deepEqual(bed.kernel.links(netns), ['eth0', 'net1']);
      assert.deepEqual(await leases(), ['blue h3 eth0:net1', 'podnet h3 eth0:eth0'], "red's lease is released");
    });

    it('after a crash while removing, recovery finishes the change: the additions stay, the removals are completed', async () => {
      const netns = pod('h4');
      assert.ok((await bed.engine.add(request('ADD', 'h4', netns, 'blue'))).ok);
      assert.ok((await bed.engine.changeNetworks('h4', 'eth0', networks('red'))).ok);
      // Cut the journal back to just after the additions were complete (blue's removal not yet recorded as done).
      const file = join(bed.journal.dir, 'h4@eth0.jsonl');
      const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
      writeFileSync(file, `${lines.slice(0, lines.findIndex((l) => l.includes('"t":"added"')) + 1).join('\n')}\n`);
      assert.ok((await bed.journal.load('h4', 'eth0'))!.changing?.added, 'the additions are complete');
      assert.equal((await bed.engine.undoUnfinished()).failed.length, 0);
      const record = await bed.journal.load('h4', 'eth0');
      assert.equal(record!.changing, undefined);
      assert.deepEqual(
        record!.details!.attachments.map((a) => `${a.network}@${a.ifname}`),
        ['default/podnet@eth0', 'default/red@net2'],
      );
      assert.deepEqual(bed.kernel.links(netns), ['eth0', 'net2']);
      assert.deepEqual(await leases(), ['podnet h4 eth0:eth0', 'red h4 eth0:net2']);
    });
  });
});
