/**
 * One async lock per key. The allocator reads its in-memory index, picks a free address and
 * awaits the disk; without a lock two allocations for the same network interleave at that
 * await, pick the same address, and the loser pays a wasted EEXIST round trip (or, for a
 * requested IP, a spurious "in use"). Locking per network keeps unrelated networks parallel.
 */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>();

  async run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let unlock!: () => void;
    const mine = new Promise<void>((resolve) => {
      unlock = resolve;
    });
    const tail = previous.then(() => mine);
    this.tails.set(key, tail);
    await previous;
    try {
      return await task();
    } finally {
      unlock();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}
