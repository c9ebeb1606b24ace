/**
 * Writes to the API that no CNI call waits for (network-status, events): each runs in the background and is retried
 * with backoff while the API is slow or down, until it is done, refused for good, or given up. settled() lets
 * shutdown and tests wait for what is under way.
 */
import type { Logger } from 'pino';
import { errorMessage } from '../common/error-message';

export interface RetryOptions {
  /** First retry delay, doubled each time up to maxDelayMs. */
  readonly firstDelayMs?: number;
  readonly maxDelayMs?: number;
  /** Attempts before a write is given up. */
  readonly attempts?: number;
}

/** What one attempt came to: written, not worth retrying (the reason is logged), or worth retrying. */
export type Attempt =
  | { readonly outcome: 'done' }
  | { readonly outcome: 'stop'; readonly why: string }
  | { readonly outcome: 'retry'; readonly why: string };

export class BackgroundWrites {
  /** Retries made by every BackgroundWrites of the process (plexus_api_write_retries_total). */
  static retried = 0;
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly log: Logger,
    private readonly options: RetryOptions = {},
  ) {}

  /** Runs `attempt` until it is done or stopped, or the attempts are spent, then `ended`; `what` names it in the log. */
  start(what: Record<string, unknown>, attempt: () => Promise<Attempt>, ended: () => void = () => undefined): void {
    const run = (async (): Promise<void> => {
      let delay = this.options.firstDelayMs ?? 200;
      const attempts = this.options.attempts ?? 12;
      for (let n = 1; ; n++) {
        const r = await attempt();
        if (r.outcome === 'done') return;
        if (r.outcome === 'stop') {
          this.log.info({ ...what, why: r.why }, 'not written');
          return;
        }
        if (n >= attempts) {
          this.log.warn({ ...what, err: r.why, attempts }, 'not written after retries; the pod runs without it');
          return;
        }
        BackgroundWrites.retried++;
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, this.options.maxDelayMs ?? 10_000);
      }
    })()
      .catch((e: unknown) => this.log.error({ ...what, err: errorMessage(e) }, 'background write failed'))
      .finally(() => {
        this.pending.delete(run);
        ended();
      });
    this.pending.add(run);
  }

  /** Resolves when every write started so far has finished (written or given up). */
  async settled(): Promise<void> {
    while (this.pending.size) await Promise.all([...this.pending]);
  }
}
