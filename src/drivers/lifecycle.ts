/**
 * The drivers' life besides attachments, run by the registry: each driver's start once, its resync every interval and
 * whenever it asks (never two at once for one driver), and its stop at the end. A driver without these has none.
 */
import type { Logger } from 'pino';
import type { KernelPort } from '../kernel/kernel';
import type { Driver, UndoStep } from './driver';
import { errorMessage } from '../common/error-message';

export interface LifecycleSettings {
  readonly log: Logger;
  /** The node's kernel, handed to each driver's start. */
  readonly kernel: KernelPort;
  /** The undo steps of every committed attachment, as the journal holds them now. */
  readonly recordedSteps: () => Promise<readonly UndoStep[]>;
  /** How often each driver with a resync runs it (besides when it asks). */
  readonly resyncIntervalMs: number;
}

export class DriverLifecycle {
  private readonly resyncing = new Set<Driver>();
  private readonly logs = new Map<Driver, Logger>();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly drivers: readonly Driver[]) {}

  /** Starts every driver in order, then the resync loop (its first round runs at once, not awaited). */
  async start(settings: LifecycleSettings): Promise<void> {
    for (const driver of this.drivers) {
      const log = settings.log.child({ component: driver.type });
      this.logs.set(driver, log);
      const requestResync = (why: string): void => void this.resync(driver, why);
      await driver.start?.({ log, kernel: settings.kernel, recordedSteps: settings.recordedSteps, requestResync });
    }
    const withResync = this.drivers.filter((d) => d.resync !== undefined);
    if (withResync.length === 0) return;
    this.timer = setInterval(() => {
      for (const driver of withResync) void this.resync(driver, 'periodic check');
    }, settings.resyncIntervalMs);
    this.timer.unref();
    for (const driver of withResync) void this.resync(driver, 'start');
  }

  /** Ends the resync loop, then stops every driver, the last started first. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    for (const driver of [...this.drivers].reverse()) {
      try {
        await driver.stop?.();
      } catch (e) {
        this.logs.get(driver)?.warn({ err: errorMessage(e) }, `stopping the ${driver.type} driver failed`);
      }
    }
  }

  /** Runs one driver's resync unless one is running or the drivers are stopping; a failure is logged, not thrown. */
  async resync(driver: Driver, why: string): Promise<void> {
    if (this.stopped || !driver.resync || this.resyncing.has(driver)) return;
    this.resyncing.add(driver);
    try {
      await driver.resync(why);
    } catch (e) {
      this.logs.get(driver)?.warn({ err: errorMessage(e), why }, `${driver.type} resync failed`);
    } finally {
      this.resyncing.delete(driver);
    }
  }
}
