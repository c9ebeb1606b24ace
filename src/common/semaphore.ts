/**
 * Bounded concurrency with back-pressure: at most `limit` tasks run, at most `maxQueued` wait, and the rest are
 * refused at once, so a burst of pods after a node reboot cannot grow the daemon's memory without bound.
 */
export class Semaphore {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(
    readonly limit: number,
    readonly maxQueued: number,
  ) {}

  get inFlight(): number {
    return this.running;
  }
  get queued(): number {
    return this.waiting.length;
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
      const next = this.waiting.shift();
      if (next) next(); // hand the slot over directly
      else this.running--;
    }
  }
}
