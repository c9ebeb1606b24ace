/**
 * Whether the kubelet knows the driver plexus.io, as plexusd can tell. The kubelet's plugin manager calls GetInfo on
 * the registration socket, adds the driver to its DRA plugins, and only then calls NotifyRegistrationStatus: from
 * that answer on the driver is known. A kubelet from 1.34 on also keeps a connection to the DRA service socket of
 * each plugin it registered (and connects again at once when one closes, as after an idle timeout): when the last
 * one closes and none comes back within `lostAfterMs`, the kubelet is gone (stopped, crashed, restarting). A
 * kubelet that comes back connects again when it registers the driver anew. Serving the sockets again (one was
 * removed) or closing them deregisters the driver. `changed` hears each change, with the reason.
 */
import type { RegistrationStatus } from './api';

/** How long the kubelet may be without a connection to the service socket before it counts as gone. */
export const KUBELET_LOST_AFTER_MS = 2000;

export type RegistrationChange = (known: boolean, reason: string) => void;

export class KubeletRegistration {
  private registered = false;
  private connections = 0;
  private lost = false;
  private lostTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly changed: RegistrationChange,
    private readonly lostAfterMs = KUBELET_LOST_AFTER_MS,
  ) {}

  /** The kubelet has registered the driver and has not gone since. */
  get known(): boolean {
    return this.registered && !this.lost;
  }

  /** The kubelet's NotifyRegistrationStatus. */
  notified(status: RegistrationStatus): void {
    const reason = status.plugin_registered
      ? 'the kubelet registered plexus.io'
      : `the kubelet refused to register plexus.io: ${status.error}`;
    this.update(reason, () => {
      this.registered = status.plugin_registered;
      if (status.plugin_registered) this.lost = false;
    });
  }

  /** The registration socket is served anew or closed: the kubelet deregisters the driver, and must register it again. */
  deregistered(reason: string): void {
    this.update(reason, () => {
      this.registered = false;
      this.lost = false;
      this.clearTimer();
    });
  }

  /** A connection to the DRA service socket was accepted. */
  connectionOpened(): void {
    this.connections++;
    this.clearTimer();
    this.update('the kubelet connected to the DRA socket again', () => (this.lost = false));
  }

  /** A connection to the DRA service socket closed. */
  connectionClosed(): void {
    this.connections = Math.max(0, this.connections - 1);
    if (this.connections > 0 || !this.registered || this.lostTimer) return;
    this.lostTimer = setTimeout(() => {
      this.lostTimer = undefined;
      if (this.connections > 0) return;
      const seconds = this.lostAfterMs / 1000;
      this.update(
        `the kubelet closed its connection to the DRA socket and did not come back within ${seconds} s`,
        () => {
          this.lost = true;
        },
      );
    }, this.lostAfterMs);
    this.lostTimer.unref();
  }

  /** Stops the timer (plexusd stopping). */
  close(): void {
    this.clearTimer();
  }

  private clearTimer(): void {
    if (this.lostTimer) clearTimeout(this.lostTimer);
    this.lostTimer = undefined;
  }

  private update(reason: string, change: () => void): void {
    const before = this.known;
    change();
    if (this.known !== before) this.changed(this.known, reason);
  }
}
