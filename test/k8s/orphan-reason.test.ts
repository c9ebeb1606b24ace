import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { AttachmentRecord } from '../../src/engine/journal';
import { adoptedOrphanReason, orphanReason } from '../../src/k8s/orphans';

const record = (
  over: Partial<AttachmentRecord> = {},
  pod = { namespace: 'default', name: 'web-0', uid: 'u1' },
): AttachmentRecord => ({
  meta: {
    containerId: 'c1',
    ifname: 'eth0',
    netns: '/var/run/netns/x',
    pod,
    cniNetwork: 'plexus',
    networks: [],
    startedAt: '',
  },
  undo: [],
  undoOwners: [],
  events: [],
  result: { interfaces: [], ips: [], routes: [] },
  deleting: false,
  ...over,
});
const pods = (uids: Record<string, string>) => ({
  cachedPod: (ns: string, name: string) =>
    uids[`${ns}/${name}`] ? { uid: uids[`${ns}/${name}`]!, sandboxUid: uids[`${ns}/${name}`]! } : undefined,
});
const gone = (): boolean => false;
const there = (): boolean => true;

describe('orphanReason', () => {
  it('keeps a pod whose netns exists, whatever the API says', () => {
    assert.equal(orphanReason(record(), pods({}), there), undefined);
  });
  it('keeps a pod whose netns is gone while the API has it with the same UID', () => {
    assert.equal(orphanReason(record(), pods({ 'default/web-0': 'u1' }), gone), undefined);
  });
  it('removes one whose netns is gone and whose pod is not on this node', () => {
    assert.match(orphanReason(record(), pods({}), gone) ?? '', /no longer on this node/);
  });
  it('removes one whose netns is gone and whose name now belongs to another UID', () => {
    assert.match(orphanReason(record(), pods({ 'default/web-0': 'u2' }), gone) ?? '', /another pod \(UID u2, not u1\)/);
  });
  it('leaves uncommitted, deleting and changing records, and sandboxes of no Kubernetes pod, to their owners', () => {
    assert.equal(orphanReason(record({ result: undefined }), pods({}), gone), undefined);
    assert.equal(orphanReason(record({ deleting: true }), pods({}), gone), undefined);
    assert.equal(orphanReason(record({ changing: { add: [], remove: [] } }), pods({}), gone), undefined);
    assert.equal(orphanReason(record({}, { namespace: '', name: '', uid: '' }), pods({}), gone), undefined);
  });
});

describe('adoptedOrphanReason (sandboxes Multus made)', () => {
  const sandbox = {
    containerId: 'm1',
    maker: 'multus',
    networks: [{ name: 'podnet', ifname: 'eth0' }],
    pod: { namespace: 'default', name: 'web-0', uid: 'u1' },
    netns: '/var/run/netns/m',
  };
  it('keeps one whose netns exists, or whose pod the API still has with that UID', () => {
    assert.equal(adoptedOrphanReason(sandbox, pods({}), there), undefined);
    assert.equal(adoptedOrphanReason(sandbox, pods({ 'default/web-0': 'u1' }), gone), undefined);
  });
  it('removes one whose netns is gone and whose pod is gone or another pod now', () => {
    assert.match(adoptedOrphanReason(sandbox, pods({}), gone) ?? '', /no longer on this node/);
    assert.match(adoptedOrphanReason(sandbox, pods({ 'default/web-0': 'u2' }), gone) ?? '', /no longer on this node/);
  });
  it('keeps one whose pod or netns Multus did not record', () => {
    const { pod: _pod, ...noPod } = sandbox;
    const { netns: _netns, ...noNetns } = sandbox;
    assert.equal(adoptedOrphanReason(noPod, pods({}), gone), undefined);
    assert.equal(adoptedOrphanReason(noNetns, pods({}), gone), undefined);
  });
});
