/** NetworkStatusKeeper's rules, on fakes: what is written back, when the journal is read, and when it gives up. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pino from 'pino';
import type { AttachmentRecord } from '../../src/engine/journal';
import type { CachedPod } from '../../src/k8s/pod-source';
import { NetworkStatusKeeper } from '../../src/k8s/status-keeper';
import type { NetworkStatusEntry } from '../../src/networks/status';

const STATUS = 'k8s.v1.cni.cncf.io/network-status';
const status: NetworkStatusEntry[] = [
  { name: 'default/podnet', interface: 'eth0', ips: ['10.1.0.7'], mac: '02:00:00:00:00:07', default: true, dns: {} },
];
const pod = (annotation?: string, uid = 'u1'): CachedPod => ({
  namespace: 'default',
  name: 'web',
  uid,
  sandboxUid: uid,
  annotations: annotation === undefined ? {} : { [STATUS]: annotation },
});
const record = (containerId: string, at: string, s: NetworkStatusEntry[], uid = 'u1'): AttachmentRecord => ({
  meta: {
    containerId,
    ifname: 'eth0',
    netns: '/x',
    pod: { namespace: 'default', name: 'web', uid },
    cniNetwork: 'plexus',
    networks: ['default/podnet'],
    startedAt: at,
  },
  undo: [],
  undoOwners: [],
  events: [{ at, what: 'committed' }],
  result: { cniVersion: '1.0.0', interfaces: [], ips: [], routes: [] } as unknown as AttachmentRecord['result'],
  details: { attachments: [], networkStatus: s },
  deleting: false,
});

function bed(records: AttachmentRecord[]) {
  let watcher: (p: CachedPod, previous: CachedPod | undefined) => void = () => undefined;
  const cached: CachedPod[] = [];
  const writes: { containerId: string; status: readonly NetworkStatusEntry[] }[] = [];
  let reads = 0;
  const keeper = new NetworkStatusKeeper(
    { records: async () => (reads++, records) },
    { list: () => cached, onChange: (w) => (watcher = w) },
    { attached: (_p, containerId, s) => void writes.push({ containerId, status: s }) },
    pino({ level: 'silent' }),
  );
  const change = async (from: CachedPod, to: CachedPod): Promise<void> => {
    watcher(to, from);
    await new Promise((r) => setImmediate(r));
  };
  return { keeper, cached, writes, change, reads: () => reads };
}

describe('NetworkStatusKeeper', () => {
  it("writes back the newest committed record's status of the pod's UID when another writer changes it", async () => {
    const older: NetworkStatusEntry[] = [{ ...status[0]!, ips: ['10.1.0.3'] }];
    const b = bed([
      record('c-new', '2026-01-01T00:00:02Z', status),
      record('c-old', '2026-01-01T00:00:01Z', older),
      record('c-other', '2026-01-01T00:00:03Z', older, 'u0'),
    ]);
    await b.change(pod(JSON.stringify(status)), pod('[]'));
    assert.deepEqual(b.writes, [{ containerId: 'c-new', status }]);
  });

  it('reads no journal for its own write (the value the engine reported), nor for a change of other annotations', async () => {
    const b = bed([record('c1', '2026-01-01T00:00:01Z', status)]);
    b.keeper.sink.attached({ namespace: 'default', name: 'web', uid: 'u1' }, 'c1', status, []);
    await b.change(pod(undefined), pod(JSON.stringify(status, null, 2)));
    await b.change(pod(JSON.stringify(status)), {
      ...pod(JSON.stringify(status)),
      annotations: { [STATUS]: JSON.stringify(status), other: 'x' },
    });
    assert.equal(b.reads(), 0);
    assert.deepEqual(b.writes, []);
  });

  it('leaves alone a pod it has no committed record of', async () => {
    const b = bed([]);
    await b.change(pod(JSON.stringify(status)), pod('[]'));
    assert.deepEqual(b.writes, []);
  });

  it('stops fighting a writer that keeps rewriting after 5 restores', async () => {
    const b = bed([record('c1', '2026-01-01T00:00:01Z', status)]);
    for (let i = 0; i < 8; i++) await b.change(pod(JSON.stringify(status)), pod(`[{"name":"forged-${i}"}]`));
    assert.equal(b.writes.length, 5);
  });

  it('compares every cached pod at start', async () => {
    const b = bed([record('c1', '2026-01-01T00:00:01Z', status)]);
    b.cached.push(pod(undefined));
    await b.keeper.resyncAll();
    assert.deepEqual(b.writes, [{ containerId: 'c1', status }]);
  });
});
