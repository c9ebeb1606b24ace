/** Processes a test started itself, and only those: stopped by their PIDs, never by name. */
import type { ChildProcess } from 'node:child_process';

/** Sends `signal` to a child this test started, SIGKILL after `graceMs`; resolves once it has exited. */
export async function stopProcess(
  p: ChildProcess | undefined,
  signal: NodeJS.Signals = 'SIGTERM',
  graceMs = 10_000,
): Promise<void> {
  if (!p || p.exitCode !== null || p.signalCode !== null) return;
  const exited = new Promise<void>((r) => p.once('exit', () => r()));
  p.kill(signal);
  const timer = setTimeout(() => p.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}
