/**
 * The delegated plugin processes running now, so that a stopping plexusd leaves none behind. A plugin left running
 * would finish its ADD after the next plexusd's recovery and the runtime's DEL had undone it: an interface with an
 * address in the pod and a lease no record knows. Each plugin runs in a process group of its own (plugin-run.ts), so
 * what it runs in turn (the IPAM plugin it delegates to, a `sleep`) is stopped with it. Once stopping, no plugin
 * starts: whatever the cut-off call was doing is undone by the next start's recovery, which runs the DEL journaled
 * before the ADD, now that the ADD can no longer be running. A plexusd that dies without its stop leaves its plugins'
 * PIDs on disk (plugin-pid-files.ts), and the next one kills those still running before its recovery.
 */
import { CniCode, CniError } from '../../cni/errors';
import { type PluginPidFiles, processStart } from './plugin-pid-files';

/** How often a stop looks whether the killed process groups are gone. */
const POLL_MS = 10;

export interface StoppedPlugins {
  /** Process groups killed. */
  readonly killed: number;
  /** Of those, groups with a process still there when the wait ended. */
  readonly left: number;
}

export class PluginProcesses {
  /** Running plugins, by PID (= their process group), with their leader's exit. */
  private readonly running = new Map<number, Promise<void>>();
  private stopping = false;

  /** With `files`, each running plugin is noted on disk too, for the next plexusd if this one dies without a stop. */
  constructor(private readonly files?: PluginPidFiles) {}

  /** How many plugins run now. */
  get size(): number {
    return this.running.size;
  }

  /** Undefined when a plugin may start; else why not (the daemon is stopping), as the call's error. */
  refusal(type: string): CniError | undefined {
    if (!this.stopping) return undefined;
    return new CniError(
      CniCode.TryAgainLater,
      `plugin ${type} not started: plexusd is stopping`,
      'the call is retried on the next plexusd',
    );
  }

  /** Tracks a started plugin until `exited` (its leader's exit) settles. */
  track(pid: number, exited: Promise<void>): void {
    this.running.set(pid, exited);
    const file = this.files?.add(pid);
    void exited.finally(() => {
      this.running.delete(pid);
      if (file) this.files?.remove(file);
    });
  }

  /**
   * Starts no more plugins, kills every running one's process group (SIGKILL), and waits until each group is gone,
   * at most `waitMs` (a member left a zombie by a parent that never reaps it counts as there until then).
   */
  async stop(waitMs: number): Promise<StoppedPlugins> {
    this.stopping = true;
    const groups = [...this.running.keys()];
    for (const pid of groups) signalGroup(pid, 'SIGKILL');
    const left = await waitGone(groups, (pid) => this.running.has(pid) || signalGroup(pid, 0), waitMs);
    return { killed: groups.length, left: left.length };
  }

  /**
   * At start, before recovery: kills the plugins a plexusd that died without its stop left running (their process
   * groups), and waits for them, at most `waitMs`. Recovery's DELs then run after them, never beside them.
   */
  async stopLeftovers(waitMs: number): Promise<StoppedPlugins> {
    const found = this.files?.stillRunning() ?? [];
    for (const { pid } of found) signalGroup(pid, 'SIGKILL');
    const stillThere = (pid: number): boolean =>
      found.some((l) => l.pid === pid && processStart(pid) === l.start) || signalGroup(pid, 0);
    const left = await waitGone(
      found.map((l) => l.pid),
      stillThere,
      waitMs,
    );
    for (const { file } of found) this.files?.remove(file);
    return { killed: found.length, left: left.length };
  }
}

/** Waits until no group is `stillThere`, at most `waitMs`; answers those that still were. */
async function waitGone(groups: number[], stillThere: (pid: number) => boolean, waitMs: number): Promise<number[]> {
  const deadline = Date.now() + waitMs;
  for (let left = groups; ;) {
    left = left.filter(stillThere);
    if (left.length === 0 || Date.now() >= deadline) return left;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** Signals a process group; false when it has no process left. */
function signalGroup(pid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pid, signal);
    return true;
  } catch {
    return false;
  }
}
