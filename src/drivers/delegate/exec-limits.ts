/**
 * How many delegated plugins run at once. Each delegated network has a share of its own, so a network whose plugin
 * hangs (a DHCP server that never answers) holds only its share until the plugin's timeout, and all plugins together
 * are capped node-wide so a reboot cannot fork-bomb the host. While a call waits for or runs a plugin it lends its
 * node-wide CNI slot: native attachments and other networks keep flowing meanwhile.
 */
import { Semaphore } from '../../common/semaphore';

export interface ExecLimitsOptions {
  /** Plugins of one network running at once. */
  readonly perNetwork: number;
  /** Plugins running at once on the node. */
  readonly total: number;
  /** Execs waiting per network (and node-wide) before more are refused with "try again later". */
  readonly maxQueued: number;
  /** Lends the caller's CNI slot while `wait` runs (CallSlots.lendWhile); none: the caller keeps it. */
  readonly lendSlot?: <T>(wait: () => Promise<T>) => Promise<T>;
}

export const DEFAULT_EXEC_LIMITS: ExecLimitsOptions = { perNetwork: 8, total: 32, maxQueued: 100_000 };

export class ExecLimits {
  private readonly shares = new Map<string, Semaphore>();
  private readonly total: Semaphore;

  constructor(private readonly options: ExecLimitsOptions = DEFAULT_EXEC_LIMITS) {
    this.total = new Semaphore(options.total, options.maxQueued);
  }

  /** Plugins of a network running now (for tests and metrics). */
  running(network: string): number {
    return this.shares.get(network)?.inFlight ?? 0;
  }

  /** Runs one exec within its network's share and the node-wide cap; undefined when either queue is full. */
  run<T>(network: string, exec: () => Promise<T>): Promise<{ value: T } | undefined> {
    const share = this.shareOf(network);
    const limited = async (): Promise<{ value: T } | undefined> => {
      const ran = await share.run(() => this.total.run(exec));
      return ran?.value;
    };
    return this.options.lendSlot ? this.options.lendSlot(limited) : limited();
  }

  private shareOf(network: string): Semaphore {
    // Idle shares are dropped now and then, so networks that come and go do not grow the map.
    if (this.shares.size > 1024) this.dropIdleShares();
    let share = this.shares.get(network);
    if (!share) {
      share = new Semaphore(this.options.perNetwork, this.options.maxQueued);
      this.shares.set(network, share);
    }
    return share;
  }

  private dropIdleShares(): void {
    for (const [network, share] of this.shares)
      if (share.inFlight === 0 && share.queued === 0) this.shares.delete(network);
  }
}
