/**
 * The node-wide bound on CNI calls handled at once, with back-pressure (at most `maxQueued` wait; the rest are refused
 * at once, so a burst of pods after a reboot cannot grow memory without bound).
 *
 * A call may lend its slot while it waits on something outside the node's control, such as a delegated plugin that
 * may hang until its timeout: the slot serves the next call meanwhile and is taken back afterwards, ahead of new
 * calls. Which slot a call holds travels with its async context, so code deep in a driver can lend it without every
 * layer in between passing it along.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

interface Slot {
  lent: boolean;
}

export class CallSlots {
  private running = 0;
  private lent = 0;
  /** New calls waiting for a slot. */
  private readonly waiting: (() => void)[] = [];
  /** Calls taking back a slot they lent: served before new calls. */
  private readonly returning: (() => void)[] = [];
  private readonly current = new AsyncLocalStorage<Slot>();

  constructor(
    readonly limit: number,
    readonly maxQueued: number,
  ) {}

  /** Calls holding a slot. */
  get inFlight(): number {
    return this.running;
  }
  /** Calls waiting for a slot. */
  get queued(): number {
    return this.waiting.length + this.returning.length;
  }
  /** Calls that lent their slot while they wait elsewhere. */
  get lending(): number {
    return this.lent;
  }

  /** Runs the task once a slot is free; undefined, without running it, when the queue is full. */
  async run<T>(task: () => Promise<T>): Promise<{ value: T } | undefined> {
    if (this.running >= this.limit) {
      if (this.waiting.length >= this.maxQueued) return undefined;
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.running++;
    }
    const slot: Slot = { lent: false };
    try {
      return { value: await this.current.run(slot, task) };
    } finally {
      this.free();
    }
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
    this.free();
    try {
      return await wait();
    } finally {
      await this.takeBack();
      this.lent--;
      slot.lent = false;
    }
  }

  private free(): void {
    const next = this.returning.shift() ?? this.waiting.shift();
    if (next) next(); // the slot passes straight to the next holder
    else this.running--;
  }

  private async takeBack(): Promise<void> {
    if (this.running < this.limit) this.running++;
    else await new Promise<void>((resolve) => this.returning.push(resolve));
  }
}
