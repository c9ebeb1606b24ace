/** Semaphore: bounded concurrency with a bounded queue, and a released slot taken back ahead of new tasks. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Semaphore } from '../../src/common/semaphore';

const gate = (): { opened: Promise<void>; open: () => void } => {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { opened, open };
};
const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('Semaphore', () => {
  it('runs at most `limit` tasks, queues `maxQueued` and refuses the rest without running them', async () => {
    const slots = new Semaphore(2, 1);
    const g = gate();
    const running = [slots.run(() => g.opened), slots.run(() => g.opened)];
    const queued = slots.run(() => Promise.resolve('queued'));
    let ran = false;
    const refused = await slots.run(() => Promise.resolve((ran = true)));
    assert.equal(refused, undefined);
    assert.equal(ran, false);
    assert.deepEqual([slots.inFlight, slots.queued], [2, 1]);
    g.open();
    await Promise.all(running);
    assert.deepEqual(await queued, { value: 'queued' });
    assert.equal(slots.inFlight, 0);
  });

  it('gives a slot taken back to its holder before tasks that queued earlier', async () => {
    const slots = new Semaphore(1, 10);
    const order: string[] = [];
    const back = gate();
    const holder = slots.run(async () => {
      slots.release();
      await back.opened;
      await slots.takeBack();
      order.push('holder');
    });
    await tick();
    const busy = gate();
    const other = slots.run(() => busy.opened.then(() => order.push('other')));
    const late = slots.run(() => Promise.resolve(order.push('late')));
    await tick();
    back.open();
    await tick();
    busy.open();
    await Promise.all([holder, other, late]);
    assert.deepEqual(order, ['other', 'holder', 'late']);
    assert.equal(slots.inFlight, 0);
  });
});
