import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { requestCounts, writesBetween, writesByResource } from '../../scripts/lib/bench/api-requests';
import { burstFigures, burstRatio } from '../../scripts/lib/bench/cluster-burst';

const sample = (verb: string, group: string, resource: string, code: string, n: number, subresource = ''): string =>
  `apiserver_request_total{code="${code}",component="apiserver",dry_run="",group="${group}",resource="${resource}",` +
  `scope="resource",subresource="${subresource}",verb="${verb}",version="v1"} ${n}`;

describe("the cluster bench's count of the API server's requests", () => {
  const before = requestCounts(
    [
      '# HELP apiserver_request_total [STABLE] Counter of apiserver requests',
      '# TYPE apiserver_request_total counter',
      sample('POST', 'ipam.plexus.io', 'ipblocks', '201', 3),
      sample('POST', 'ipam.plexus.io', 'ipblocks', '409', 1),
      sample('LIST', 'ipam.plexus.io', 'ipblocks', '200', 40),
      sample('PATCH', '', 'pods', '200', 10, 'status'),
      'apiserver_request_duration_seconds_bucket{verb="POST",le="0.1"} 99',
    ].join('\n'),
  );
  const after = requestCounts(
    [
      sample('POST', 'ipam.plexus.io', 'ipblocks', '201', 9),
      sample('POST', 'ipam.plexus.io', 'ipblocks', '409', 2),
      sample('PUT', 'ipam.plexus.io', 'ipblocks', '200', 5),
      sample('DELETE', 'ipam.plexus.io', 'ippools', '200', 1),
      sample('LIST', 'ipam.plexus.io', 'ipblocks', '200', 400),
      sample('WATCH', 'ipam.plexus.io', 'ipblocks', '200', 7),
      sample('PATCH', '', 'pods', '200', 30, 'status'),
      sample('PATCH', '', 'pods', '200', 6),
    ].join('\n'),
  );

  it('sums each verb and resource over response codes, and skips other metrics', () => {
    assert.deepEqual(before, [
      { verb: 'POST', group: 'ipam.plexus.io', resource: 'ipblocks', subresource: '', count: 4 },
      { verb: 'LIST', group: 'ipam.plexus.io', resource: 'ipblocks', subresource: '', count: 40 },
      { verb: 'PATCH', group: '', resource: 'pods', subresource: 'status', count: 10 },
    ]);
  });

  it('counts only writes (not reads or watches) of the group asked, between two readings', () => {
    assert.equal(writesBetween(before, after, { group: 'ipam.plexus.io' }), 7 + 5 + 1);
    assert.equal(writesBetween(before, after, { resource: 'pods', subresource: '' }), 6);
    assert.equal(writesBetween(before, after), 13 + 20 + 6);
  });

  it('lists the writes between two readings by resource, the busiest first', () => {
    assert.deepEqual(writesByResource(before, after), [
      ['core/pods/status', 20],
      ['ipam.plexus.io/ipblocks', 12],
      ['core/pods', 6],
      ['ipam.plexus.io/ippools', 1],
    ]);
  });
});

describe("the cluster bench's burst figures", () => {
  it('times each pod from its create to Running, p50 and p99 by nearest rank, all Running from the first create', () => {
    const clocks = Array.from({ length: 100 }, (_, i) => ({
      createdAt: 1000 + i,
      runningAt: 1000 + i + (i + 1) * 100,
    }));
    const f = burstFigures([...clocks, { createdAt: 1000 }], 900);
    assert.deepEqual(f, { pods: 101, running: 100, p50Seconds: 5, p99Seconds: 9.9, allRunningSeconds: 10.2 });
  });

  it('gives plexus over plain for each figure', () => {
    const plain = { pods: 60, running: 60, p50Seconds: 10, p99Seconds: 20, allRunningSeconds: 25 };
    const plexus = { ...plain, p50Seconds: 10.5, p99Seconds: 19, allRunningSeconds: 25 };
    assert.deepEqual(burstRatio(plexus, plain), { p50: 1.05, p99: 0.95, allRunning: 1 });
  });
});
