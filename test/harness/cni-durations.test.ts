import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { callDurations } from '../../scripts/lib/bench/cni-durations';

const bucket = (command: string, types: string, le: string, n: number): string =>
  `plexus_cni_request_duration_seconds_bucket{command="${command}",network_type="${types}",result="ok",le="${le}"} ${n}`;

describe("the churn bench's reading of plexusd's CNI call histogram", () => {
  it('sums one command over network types and reads the buckets holding the median and the 90th percentile', () => {
    const text = [
      '# HELP plexus_cni_request_duration_seconds CNI request latency',
      bucket('DEL', 'bridge', '0.001', 0),
      bucket('DEL', 'bridge', '0.0025', 3),
      bucket('DEL', 'bridge', '0.005', 6),
      bucket('DEL', 'bridge', '0.01', 8),
      bucket('DEL', 'bridge', '+Inf', 8),
      bucket('DEL', 'bridge+macvlan', '0.001', 0),
      bucket('DEL', 'bridge+macvlan', '0.0025', 0),
      bucket('DEL', 'bridge+macvlan', '0.005', 1),
      bucket('DEL', 'bridge+macvlan', '0.01', 1),
      bucket('DEL', 'bridge+macvlan', '+Inf', 2),
      bucket('ADD', 'bridge', '0.001', 0),
      bucket('ADD', 'bridge', '+Inf', 50),
    ].join('\n');
    assert.deepEqual(callDurations(text, 'DEL'), { command: 'DEL', calls: 10, p50AtMost: 0.005, p90AtMost: 0.01 });
  });

  it('is undefined for a command with no calls', () => {
    assert.equal(callDurations(bucket('ADD', 'bridge', '+Inf', 3), 'DEL'), undefined);
  });
});
