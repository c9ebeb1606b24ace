/**
 * One plexusd per state directory. A replacement daemon (a rolling upgrade) must not recover the journal while the
 * one it replaces is still draining calls it accepted: it would undo transactions that are still running. The lock
 * is a flock on <stateDir>/plexusd.lock, which the kernel drops when the holder exits, however it exits.
 */
import { closeSync, openSync, readFileSync, writeSync, ftruncateSync } from 'node:fs';
import { join } from 'node:path';
import { sys } from '../kernel/syscalls';

const LOCK_EX = 2;
const LOCK_NB = 4;
const EWOULDBLOCK = 11;

export interface InstanceLock {
  release(): void;
}

/**
 * Takes the lock, waiting (without blocking the event loop) while another daemon holds it; `waiting` is told once,
 * with the holder's PID, so the log says why start-up pauses.
 */
export async function acquireInstanceLock(stateDir: string, waiting: (holderPid: string) => void, pollMs = 50): Promise<InstanceLock> {
  const path = join(stateDir, 'plexusd.lock');
  const fd = openSync(path, 'a+', 0o600);
  let told = false;
  for (;;) {
    if (sys.flock(fd, LOCK_EX | LOCK_NB) === 0) break;
    const errno = sys.errno();
    if (errno !== EWOULDBLOCK) {
      closeSync(fd);
      throw new Error(`cannot lock ${path}: errno ${errno}`);
    }
    if (!told) {
      told = true;
      waiting(readFileSync(path, 'utf8').trim() || 'unknown');
    }
    await new Promise((r) => setTimeout(r, pollMs));
  }
  ftruncateSync(fd, 0);
  writeSync(fd, `${process.pid}\n`, 0);
  return { release: () => closeSync(fd) };
}
