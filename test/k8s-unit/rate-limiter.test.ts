/** The API client's QPS/burst limit: a burst goes at once, then the rate holds, and urgent callers go first. */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { RateLimiter } from '../../src/k8s/rate-limiter';

it('lets a burst through at once, then spaces requests at the QPS, serving urgent callers first', async () => {
  const limiter = new RateLimiter(20, 5);
  const started = performance.now();
  const order: string[] = [];
  const waits = [];
  for (let i = 0; i < 5; i++) waits.push(limiter.take().then(() => order.push(`b${i}`)));
  for (let i = 0; i < 3; i++) waits.push(limiter.take().then(() => order.push(`n${i}`)));
  waits.push(limiter.take(true).then(() => order.push('urgent')));
  await Promise.all(waits.slice(0, 5));
  assert.ok(performance.now() - started < 20, 'the burst does not wait');
  await Promise.all(waits);
  const elapsed = performance.now() - started;
  // 4 requests after the burst at 20/s: about 200 ms.
  assert.ok(elapsed >= 180 && elapsed < 600, `4 requests past the burst took ${elapsed.toFixed(0)} ms`);
  assert.deepEqual(order, ['b0', 'b1', 'b2', 'b3', 'b4', 'urgent', 'n0', 'n1', 'n2']);
});
