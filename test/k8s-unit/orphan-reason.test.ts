/**
 * Which journal records and adopted sandboxes the orphan sweep may remove, as the reason these pure functions give (or
 * undefined: none). The sweep that acts on the reason is tested in orphans.test.ts and multus-orphans.test.ts.
 */
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
  it('gives no reason to remove a pod whose netns exists, whatever the API says', () => {
    assert.equal(orphanReason(record(), pods({}), there), undefined);
  });
  it('gives no reason to remove a pod whose netns is gone while the API has it with the same UID', () => {
    assert.equal(orphanReason(record(), pods({ 'default/web-0': 'u1' }), gone), undefined);
  });
  it('gives the reason to remove one whose netns is gone and whose pod is not on this node', () => {
    assert.match(orphanReason(record(), pods({}), gone) ?? '', /no longer on this node/);
  });
  it('gives the reason to remove one whose netns is gone and whose name now belongs to another UID', () => {
    assert.match(orphanReason(record(), pods({ 'default/web-0': 'u2' }), gone) ?? '', /another pod \(UID u2, not u1\)/);
  });
  it('gives no reason to remove uncommitted, deleting or changing records, or sandboxes of no Kubernetes pod', () => {
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
  it('gives no reason to remove one whose netns exists, or whose pod the API still has with that UID', () => {
    assert.equal(adoptedOrphanReason(sandbox, pods({}), there), undefined);
    assert.equal(adoptedOrphanReason(sandbox, pods({ 'default/web-0': 'u1' }), gone), undefined);
  });
  it('gives the reason to remove one whose netns is gone and whose pod is gone or another pod now', () => {
    assert.match(adoptedOrphanReason(sandbox, pods({}), gone) ?? '', /no longer on this node/);
    assert.match(adoptedOrphanReason(sandbox, pods({ 'default/web-0': 'u2' }), gone) ?? '', /no longer on this node/);
  });
  it('gives no reason to remove one whose pod or netns Multus did not record', () => {
    const { pod: _pod, ...noPod } = sandbox;
    const { netns: _netns, ...noNetns } = sandbox;
    assert.equal(adoptedOrphanReason(noPod, pods({}), gone), undefined);
    assert.equal(adoptedOrphanReason(noNetns, pods({}), gone), undefined);
  });
});
