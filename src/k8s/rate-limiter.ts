/**
 * A client-side token bucket (client-go's QPS and burst): `burst` requests may go at once, then `qps` per second.
 * A caller waits for its token; urgent callers (a pod's ADD waiting on a GET) go before the others (status and event
 * writes in the background), each kind in arrival order.
 */
export class RateLimiter {
  private tokens: number;
  private last = performance.now();
  private readonly urgent: (() => void)[] = [];
  private readonly normal: (() => void)[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly qps: number,
    private readonly burst: number,
  ) {
    this.tokens = burst;
  }

  /** Resolves when the caller may send one request. */
  take(urgent = false): Promise<void> {
    this.refill();
    if (this.waiting === 0 && this.tokens >= 1) {
      this.tokens -= 1;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      (urgent ? this.urgent : this.normal).push(resolve);
      this.schedule();
    });
  }

  /** Callers waiting for a token now. */
  get waiting(): number {
    return this.urgent.length + this.normal.length;
  }

  private refill(): void {
    const now = performance.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.qps);
    this.last = now;
  }

  private schedule(): void {
    if (this.timer) return;
    const wait = Math.max(0, ((1 - this.tokens) / this.qps) * 1000);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.refill();
      while (this.waiting && this.tokens >= 1) {
        this.tokens -= 1;
        (this.urgent.shift() ?? this.normal.shift())!();
      }
      if (this.waiting) this.schedule();
    }, wait);
  }
}
