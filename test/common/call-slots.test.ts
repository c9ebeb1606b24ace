/** CallSlots: the node-wide bound on CNI calls, and a call lending its slot while it waits elsewhere. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CallSlots } from '../../src/common/call-slots';

const gate = (): { opened: Promise<void>; open: () => void } => {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { opened, open };
};
const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('CallSlots', () => {
  it('runs at most `limit` calls and refuses new ones beyond `maxQueued`', async () => {
    const slots = new CallSlots(1, 1);
    const g = gate();
    const first = slots.run(() => g.opened);
    const second = slots.run(() => Promise.resolve('second'));
    assert.equal(await slots.run(() => Promise.resolve('third')), undefined, 'the queue of one is full');
    assert.equal(slots.inFlight, 1);
    assert.equal(slots.queued, 1);
    g.open();
    await first;
    assert.deepEqual(await second, { value: 'second' });
    assert.equal(slots.inFlight, 0);
  });

  it("gives a lending call's slot to a waiting call, and takes it back before the lender goes on", async () => {
    const slots = new CallSlots(1, 10);
    const plugin = gate();
    const order: string[] = [];
    const lender = slots.run(async () => {
      await slots.lendWhile(async () => {
        await plugin.opened;
        order.push('plugin done');
      });
      order.push('lender resumed');
    });
    await tick();
    const other = await slots.run(() => {
      order.push('other ran');
      assert.equal(slots.lending, 1);
      return Promise.resolve();
    });
    assert.ok(other, 'the waiting call ran while the lender waited');
    plugin.open();
    await lender;
    assert.deepEqual(order, ['other ran', 'plugin done', 'lender resumed']);
    assert.equal(slots.inFlight, 0);
    assert.equal(slots.lending, 0);
  });

  it('serves a returning lender before calls that arrived later', async () => {
    const slots = new CallSlots(1, 10);
    const plugin = gate();
    const busy = gate();
    const order: string[] = [];
    const lender = slots.run(async () => {
      await slots.lendWhile(() => plugin.opened);
      order.push('lender');
    });
    await tick();
    const holder = slots.run(() => busy.opened.then(() => order.push('holder')));
    await tick();
    plugin.open(); // the lender wants its slot back while the holder has it
    await tick();
    const late = slots.run(() => Promise.resolve(order.push('late')));
    await tick();
    busy.open();
    await Promise.all([lender, holder, late]);
    assert.deepEqual(order, ['holder', 'lender', 'late']);
  });

  it('outside a call, lending just runs the wait', async () => {
    const slots = new CallSlots(1, 0);
    assert.equal(await slots.lendWhile(() => Promise.resolve(42)), 42);
    assert.equal(slots.inFlight, 0);
  });

  it('says a call is alone only with no other call in flight and none started shortly before it', async () => {
    const slots = new CallSlots(4, 4);
    const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
    assert.equal(await slots.run(() => Promise.resolve(slots.alone(20))).then((r) => r?.value), true, 'the first call');
    const next = await slots.run(() => Promise.resolve(slots.alone(20)));
    assert.equal(next?.value, false, 'a call right after another is part of a burst');
    await sleep(30);
    const later = await slots.run(() => Promise.resolve(slots.alone(20)));
    assert.equal(later?.value, true, 'a call 30 ms after the last is alone');
    await sleep(30);
    const g = gate();
    const holder = slots.run(() => g.opened);
    await tick();
    await sleep(30);
    const beside = await slots.run(() => Promise.resolve(slots.alone(20)));
    assert.equal(beside?.value, false, 'another call holds a slot');
    g.open();
    await holder;
  });
});
