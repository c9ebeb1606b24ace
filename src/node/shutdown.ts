/**
 * plexusd's stop, within one budget (--drain-seconds) from SIGTERM to exit: the socket closed and the calls it had
 * accepted answered, then the teardowns DELs left to the background, then the delegated plugins still running killed
 * and waited for, then what startup started, the last first. The pod's terminationGracePeriodSeconds is the budget
 * and a margin (EXIT_MARGIN_SECONDS), so the kubelet never kills plexusd mid-drain. What does not fit is left to the
 * next start: a cut-off call is replayed by plexus-cni, a pending teardown's record says `deleting`, and a killed
 * plugin's ADD is undone by recovery through the DEL journaled before it ran.
 */
import type { Logger } from 'pino';
import type { DraDriver } from '../dra';
import type { AttachmentEngine } from '../engine/engine';
import type { ClusterParts } from './cluster';
import type { DevicesAndDrivers } from './devices-and-drivers';
import type { NodeState } from './node-state';
import type { Served } from './serve';
import type { Services } from './services';

/** What a pod running plexusd needs in its grace period beyond --drain-seconds: the process's exit, the log flushed. */
export const EXIT_MARGIN_SECONDS = 5;

/** The end of the budget kept for the plugins and the services (at most this, and a quarter of the budget). */
const END_RESERVE_MS = 2000;

/** The time a stop has left, against one deadline set at SIGTERM. */
export class StopBudget {
  private readonly deadline: number;
  /** Kept at the end for killing plugins and stopping the services. */
  readonly reserveMs: number;

  constructor(budgetMs: number) {
    this.deadline = Date.now() + budgetMs;
    this.reserveMs = Math.min(END_RESERVE_MS, budgetMs / 4);
  }

  /** Milliseconds until the deadline less `keepMs` (0 when past it). */
  left(keepMs = 0): number {
    return Math.max(0, this.deadline - keepMs - Date.now());
  }
}

export interface RunningDaemon {
  readonly log: Logger;
  readonly node: NodeState;
  readonly cluster: ClusterParts;
  readonly plumbing: DevicesAndDrivers;
  readonly engine: AttachmentEngine;
  readonly served: Served;
  readonly services: Services;
  readonly dra: DraDriver | undefined;
}

/** Stops a running plexusd within `budget`; the daemon may exit once this answers. */
export async function stopDaemon(daemon: RunningDaemon, budget: StopBudget): Promise<void> {
  const { log, served, engine, plumbing } = daemon;
  served.state.ready = false;
  await drainCalls(log, served, budget.left(budget.reserveMs));
  // Teardowns DELs left to the background; any left, the next start finishes (their records say so).
  const teardownsLeft = await engine.drainTeardowns(budget.left(budget.reserveMs));
  if (teardownsLeft) log.warn({ teardownsLeft }, 'teardowns still pending at the stop; the next start finishes them');
  const plugins = await plumbing.pluginProcesses.stop(budget.left(budget.reserveMs / 2));
  if (plugins.killed > 0) {
    const message = 'delegated plugins still running at the stop were killed; recovery undoes their calls';
    log.warn(plugins, message);
  }
  const stopped = await Promise.race([
    stopServices(daemon).then(() => true),
    new Promise<false>((resolve) => setTimeout(() => resolve(false), budget.left()).unref()),
  ]);
  if (!stopped) log.warn('the services did not stop within --drain-seconds; exiting all the same');
}

/** Closes the socket once the accepted calls are answered (or `drainMs` is up), and the probes' listener. */
async function drainCalls(log: Logger, served: Served, drainMs: number): Promise<void> {
  const cut = await served.server.close(drainMs);
  await served.metricsListener?.close();
  if (!cut) log.info('drained: every accepted call was answered');
  else {
    const message = 'calls still running after the drain time were cut off; plexus-cni retries them';
    log.warn({ cut, drainMs }, message);
  }
}

async function stopServices(daemon: RunningDaemon): Promise<void> {
  const { node, cluster, plumbing, services, dra } = daemon;
  services.stopOrphans?.();
  await plumbing.drivers.stop();
  await plumbing.devicePlugins?.stop();
  await dra?.stop();
  plumbing.podResources?.close();
  const ipamStopped = cluster.clusterIpam?.stop(); // ends when api.stop() closes the client its watch is on
  await cluster.leases?.stop(); // released: the next plexusd of this node takes it at once
  await cluster.api?.stop();
  await ipamStopped;
  await node.kernel.close();
  node.lock.release();
}
