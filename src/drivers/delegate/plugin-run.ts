/**
 * One delegated plugin process, run per the CNI spec's execution protocol: CNI_* variables in the environment, the
 * config on stdin, a result or an error object on stdout. Its output is bounded (4 MiB) and its run by a deadline.
 * It runs in a process group of its own, so that a kill (at its deadline, or when plexusd stops) reaches what it runs
 * in turn too: a chain's IPAM plugin, a helper it waits on.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import type { CniCommand } from '../../cni/types';
import type { PluginProcesses } from './plugin-processes';
import { parsePluginError } from './result';
import { abortReason } from '../../common/abort';

const MAX_OUTPUT_BYTES = 4 << 20;
/** After the child exits, how long to wait for its stdout to close (a daemonised grandchild may hold it open). */
const CLOSE_GRACE_MS = 2_000;

export interface PluginCall {
  readonly command: CniCommand;
  /** The plugin type, for messages. */
  readonly type: string;
  /** The network the plugin serves: its share of concurrent execs (ExecLimits). */
  readonly network: string;
  readonly path: string;
  /** The exact bytes to write to stdin. */
  readonly stdin: string;
  readonly containerId?: string;
  readonly netns?: string;
  readonly ifname?: string;
  readonly args?: string;
  readonly cniPath: string;
}

export interface PluginOutput {
  readonly stdout: string;
  readonly stderr: string;
}

/** What bounds one run of a plugin. */
export interface RunBounds {
  /** Killed after this long. */
  readonly timeoutMs: number;
  /** The node's running plugins: this one is tracked while it runs, and not started once they are stopping. */
  readonly processes?: PluginProcesses | undefined;
  /** Aborted when the call it serves was given up on: not started after, killed if running. */
  readonly signal?: AbortSignal | undefined;
}

/** Runs the plugin once, within `bounds`. */
export function execOnce(call: PluginCall, bounds: RunBounds): Promise<Result<PluginOutput>> {
  const { timeoutMs, processes, signal } = bounds;
  const refused = processes?.refusal(call.type);
  if (refused) return Promise.resolve(err(refused));
  if (signal?.aborted) return Promise.resolve(err(notStarted(call, abortReason(signal))));
  let child: ChildProcessWithoutNullStreams;
  try {
    // detached: the child calls setsid(), leading a process group (and session) of its own, its PID the group's ID.
    child = spawn(call.path, [], { env: pluginEnv(call), stdio: ['pipe', 'pipe', 'pipe'], detached: true });
  } catch (e) {
    // Some exec failures (ETXTBSY, EACCES) are thrown at once rather than emitted.
    return Promise.resolve(err(cannotExec(call, e as NodeJS.ErrnoException)));
  }
  const run = new PluginRun(call, child, { timeoutMs, signal });
  if (processes && child.pid !== undefined) processes.track(child.pid, run.exited);
  return run.outcome;
}

/** The plugin inherits the daemon's environment (PATH for iptables and friends), less any stray CNI_* variables. */
function pluginEnv(call: PluginCall): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('CNI_')) env[k] = v;
  env.CNI_COMMAND = call.command;
  env.CNI_PATH = call.cniPath;
  if (call.containerId !== undefined) env.CNI_CONTAINERID = call.containerId;
  if (call.netns !== undefined) env.CNI_NETNS = call.netns;
  if (call.ifname !== undefined) env.CNI_IFNAME = call.ifname;
  if (call.args !== undefined) env.CNI_ARGS = call.args;
  return env;
}

/** How a plugin process ended. */
interface PluginExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/**
 * One running plugin: its output collected up to MAX_OUTPUT_BYTES (beyond that it is killed), killed at its deadline,
 * and answered once. After the child exits, its output may still be arriving: the answer waits for the pipes to close,
 * at most CLOSE_GRACE_MS (a daemonised grandchild may hold them open).
 */
class PluginRun {
  readonly outcome: Promise<Result<PluginOutput>>;
  /** Settles when the child has exited (or could not be started). */
  readonly exited: Promise<void>;
  private resolve: (r: Result<PluginOutput>) => void = () => undefined;
  private readonly stdout: Buffer[] = [];
  private readonly stderr: Buffer[] = [];
  private size = 0;
  private overflow = false;
  private exit: PluginExit | undefined;
  private timedOut = false;
  /** Why it was killed when the call it serves was given up on. */
  private abandoned: string | undefined;
  private settled = false;
  private readonly deadline: NodeJS.Timeout;
  private grace: NodeJS.Timeout | undefined;

  private readonly timeoutMs: number;
  private readonly signal: AbortSignal | undefined;

  constructor(
    private readonly call: PluginCall,
    private readonly child: ChildProcessWithoutNullStreams,
    bounds: Pick<RunBounds, 'timeoutMs' | 'signal'>,
  ) {
    this.timeoutMs = bounds.timeoutMs;
    this.signal = bounds.signal;
    const timeoutMs = this.timeoutMs;
    this.outcome = new Promise((resolve) => (this.resolve = resolve));
    this.exited = new Promise((resolve) => {
      child.once('exit', () => resolve());
      child.once('error', () => resolve());
    });
    child.stdout.on('data', (chunk: Buffer) => this.collect(this.stdout, chunk));
    child.stderr.on('data', (chunk: Buffer) => this.collect(this.stderr, chunk));
    this.deadline = setTimeout(() => this.onDeadline(), timeoutMs);
    this.signal?.addEventListener('abort', this.onAbort, { once: true });
    child.on('error', (e: NodeJS.ErrnoException) => this.finish(err(cannotExec(call, e))));
    // Plugins that exit without reading stdin make the write fail with EPIPE; their exit status tells the story.
    child.stdin.on('error', () => undefined);
    child.stdin.end(call.stdin);
    child.on('exit', (code, signal) => this.onExit({ code, signal }));
    // 'exit' always comes first; a close without one is ignored all the same.
    child.on('close', () => this.exit && this.answer());
  }

  private collect(into: Buffer[], chunk: Buffer): void {
    this.size += chunk.length;
    if (this.size <= MAX_OUTPUT_BYTES) into.push(chunk);
    else {
      this.overflow = true;
      this.kill();
    }
  }

  private onDeadline(): void {
    if (this.exit) return this.answerAfterPendingReads(); // exited in time; only its output is late
    this.timedOut = true;
    this.kill();
    // Answered once the child is reaped (so no zombie outlives the call), or after a grace period regardless.
    this.grace = setTimeout(() => this.answer(), CLOSE_GRACE_MS);
  }

  /** The call was given up on: the plugin is killed as at its deadline, and the call answered once it is reaped. */
  private readonly onAbort = (): void => {
    if (this.exit || this.timedOut || !this.signal) return;
    this.abandoned = abortReason(this.signal);
    this.kill();
    this.grace = setTimeout(() => this.answer(), CLOSE_GRACE_MS);
  };

  private onExit(exit: PluginExit): void {
    this.exit = exit;
    if (this.timedOut || this.abandoned) return this.answer();
    clearTimeout(this.grace);
    this.grace = setTimeout(() => this.answerAfterPendingReads(), CLOSE_GRACE_MS);
  }

  /**
   * Answers once the output already in the pipes is read. A timer that fired is no proof the grace went by with
   * the pipes read: a daemon descheduled for longer than the grace (a loaded node) wakes to its timers before its
   * I/O, so the answer waits one turn of the event loop, whose poll reads what arrived meanwhile.
   */
  private answerAfterPendingReads(): void {
    setImmediate(() => this.answer());
  }

  private answer(): void {
    const output = { stdout: text(this.stdout), stderr: text(this.stderr) };
    if (this.timedOut) return this.finish(err(timedOut(this.call, this.timeoutMs, output)));
    if (this.abandoned) return this.finish(err(killedAbandoned(this.call, this.abandoned)));
    if (this.overflow) return this.finish(err(overflowed(this.call, output)));
    this.finish(outcomeOf(this.call, this.exit ?? { code: null, signal: null }, output));
  }

  /** Kills the plugin's process group (its PID is the group's ID: spawned detached). */
  private kill(): void {
    if (this.child.pid === undefined || this.exit) return;
    try {
      process.kill(-this.child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }

  private finish(r: Result<PluginOutput>): void {
    if (this.settled) return;
    this.settled = true;
    this.signal?.removeEventListener('abort', this.onAbort);
    clearTimeout(this.deadline);
    clearTimeout(this.grace);
    this.child.stdout.destroy();
    this.child.stderr.destroy();
    this.resolve(r);
  }
}

const text = (bufs: Buffer[]): string => Buffer.concat(bufs).toString('utf8');

/** What a plugin that exited says: its stdout on exit 0, else its own error object, else how it ended. */
function outcomeOf(call: PluginCall, exit: PluginExit, output: PluginOutput): Result<PluginOutput> {
  if (exit.code === 0) return ok(output);
  const pluginError = parsePluginError(output.stdout) ?? parsePluginError(output.stderr);
  if (pluginError) {
    const code = pluginError.code > 0 ? pluginError.code : CniCode.Internal;
    return err(new CniError(code, `plugin ${call.type}: ${pluginError.msg}`, pluginError.details));
  }
  const how = exit.signal ? `was killed by ${exit.signal}` : `exited with status ${exit.code}`;
  const message = `plugin ${call.type} ${how} during ${call.command} without a CNI error object`;
  return err(new CniError(CniCode.Internal, message, excerpt(output.stderr, output.stdout)));
}

const cannotExec = (call: PluginCall, e: NodeJS.ErrnoException): CniError =>
  new CniError(CniCode.Internal, `plugin ${call.type}: cannot exec ${call.path}: ${e.message}`, e.code ?? '');

const timedOut = (call: PluginCall, timeoutMs: number, output: PluginOutput): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `plugin ${call.type} timed out after ${timeoutMs} ms during ${call.command} and was killed`,
    excerpt(output.stderr, output.stdout),
  );

const notStarted = (call: PluginCall, why: string): CniError =>
  new CniError(CniCode.TryAgainLater, `plugin ${call.type} was not started for ${call.command}: ${why}`);

const killedAbandoned = (call: PluginCall, why: string): CniError =>
  new CniError(CniCode.TryAgainLater, `plugin ${call.type} was killed during ${call.command}: ${why}`);

const overflowed = (call: PluginCall, output: PluginOutput): CniError =>
  new CniError(
    CniCode.Internal,
    `plugin ${call.type} printed more than ${MAX_OUTPUT_BYTES} bytes during ${call.command} and was killed`,
    excerpt(output.stderr, output.stdout),
  );

const excerpt = (stderr: string, stdout: string): string => {
  const cut = (s: string): string => (s.length > 500 ? `${s.slice(0, 500)}…` : s);
  return [stderr.trim() && `stderr: ${cut(stderr.trim())}`, stdout.trim() && `stdout: ${cut(stdout.trim())}`]
    .filter(Boolean)
    .join('; ');
};
