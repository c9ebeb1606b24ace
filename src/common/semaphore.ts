/**
 * Bounded concurrency with back-pressure: at most `limit` tasks run, at most `maxQueued` wait, and the rest are
 * refused at once, so a burst of pods after a node reboot cannot grow the daemon's memory without bound.
 * The one such primitive: CallSlots (call-slots.ts) is a Semaphore whose slots can be lent while a call waits.
 */
export class Semaphore {
  private running = 0;
  /** New tasks waiting for a slot. */
  private readonly waiting: (() => void)[] = [];
  /** Holders taking back a slot they gave up for a while (`takeBack`): served before new tasks. */
  private readonly returning: (() => void)[] = [];

  constructor(
    readonly limit: number,
    readonly maxQueued: number,
  ) {}

  /** Slots held. */
  get inFlight(): number {
    return this.running;
  }
  /** Tasks waiting for a slot, new or returning. */
  get queued(): number {
    return this.waiting.length + this.returning.length;
  }

  /** Runs the task when a slot is free; returns undefined without running it if the queue is full. */
  async run<T>(task: () => Promise<T>): Promise<{ value: T } | undefined> {
    if (this.running >= this.limit) {
      if (this.waiting.length >= this.maxQueued) return undefined;
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.running++;
    }
    try {
      return { value: await task() };
    } finally {
      this.release();
    }
  }

  /** Gives up a slot the caller holds: it passes straight to the next holder, a returning one first. */
  release(): void {
    const next = this.returning.shift() ?? this.waiting.shift();
    if (next) next();
    else this.running--;
  }

  /** Takes a slot back after `release`, ahead of new tasks and regardless of the queue bound. */
  async takeBack(): Promise<void> {
    if (this.running < this.limit) this.running++;
    else await new Promise<void>((resolve) => this.returning.push(resolve));
  }
}
