/**
 * The node-wide bound on CNI calls handled at once, with back-pressure (at most `maxQueued` wait; the rest are refused
 * at once, so a burst of pods after a reboot cannot grow memory without bound): a Semaphore, plus lending.
 *
 * A call may lend its slot while it waits on something outside the node's control, such as a delegated plugin that
 * may hang until its timeout: the slot serves the next call meanwhile and is taken back afterwards, ahead of new
 * calls. Which slot a call holds travels with its async context, so code deep in a driver can lend it without every
 * layer in between passing it along.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { Semaphore } from './semaphore';

interface Slot {
  lent: boolean;
}

export class CallSlots {
  private readonly slots: Semaphore;
  private lent = 0;
  private readonly current = new AsyncLocalStorage<Slot>();
  /** When the last two calls took their slots (performance.now()). */
  private lastStart = -Infinity;
  private gapBeforeLast = Infinity;

  constructor(
    readonly limit: number,
    readonly maxQueued: number,
  ) {
    this.slots = new Semaphore(limit, maxQueued);
  }

  /** Calls holding a slot. */
  get inFlight(): number {
    return this.slots.inFlight;
  }
  /** Calls waiting for a slot. */
  get queued(): number {
    return this.slots.queued;
  }
  /** Calls that lent their slot while they wait elsewhere. */
  get lending(): number {
    return this.lent;
  }

  /** Runs the task once a slot is free; undefined, without running it, when the queue is full. */
  run<T>(task: () => Promise<T>): Promise<{ value: T } | undefined> {
    return this.slots.run(() => {
      const now = performance.now();
      this.gapBeforeLast = now - this.lastStart;
      this.lastStart = now;
      return this.current.run({ lent: false }, task);
    });
  }

  /**
   * Whether the call under way is alone: no other call holds a slot or waits for one, and none took a slot in the
   * `quietMs` before it. In a burst calls overlap or follow each other closely even when each is short.
   */
  alone(quietMs: number): boolean {
    return this.inFlight + this.queued <= 1 && this.gapBeforeLast > quietMs;
  }

  /**
   * Runs `wait` with the caller's slot given to the next call, and takes the slot back before returning. Outside a
   * call (recovery, GC sweeps) or when already lent, it just runs `wait`.
   */
  async lendWhile<T>(wait: () => Promise<T>): Promise<T> {
    const slot = this.current.getStore();
    if (!slot || slot.lent) return wait();
    slot.lent = true;
    this.lent++;
    this.slots.release();
    try {
      return await wait();
    } finally {
      await this.slots.takeBack();
      this.lent--;
      slot.lent = false;
    }
  }
}
