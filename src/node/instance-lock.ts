/**
 * One plexusd per state directory. A replacement daemon (a rolling upgrade) must not recover the journal while the
 * one it replaces is still draining calls it accepted: it would undo transactions that are still running.
 *
 * The lock is a flock on the state directory itself, through a descriptor opened on it: a path inside it can be
 * removed and made again (a second daemon would lock the new file while the first holds the old one), the directory a
 * daemon's journal lives in cannot be swapped while that daemon holds it open. `<stateDir>/plexusd.lock` is locked too,
 * after it, as plexusd did before (a daemon of an earlier version locks only that file), and holds the holder's PID.
 * The kernel drops both locks when the holder exits, however it exits.
 */
import { closeSync, constants, ftruncateSync, openSync, readFileSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { errnoName, sys } from '../kernel/syscalls';

const LOCK_EX = 2;
const LOCK_NB = 4;
const EWOULDBLOCK = 11;

export interface InstanceLock {
  release(): void;
}

/** The PID that holds the lock: from the PID file, else (the file removed) the kernel's list of flocks on the directory. */
function holderOf(pidFile: string, stateDir: string): string {
  try {
    const pid = readFileSync(pidFile, 'utf8').trim();
    if (pid) return pid;
  } catch {
    /* removed: ask the kernel */
  }
  try {
    const inode = statSync(stateDir).ino;
    // "1: FLOCK  ADVISORY  WRITE <pid> <maj>:<min>:<inode> 0 EOF"; waiters are listed as "1: -> FLOCK ...".
    const fields = readFileSync('/proc/locks', 'utf8')
      .split('\n')
      .map((l) => l.trim().split(/\s+/));
    const entry = fields.find((f) => f[1] === 'FLOCK' && f[5]?.endsWith(`:${inode}`));
    return entry?.[4] ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** Takes an exclusive flock on `fd`, polling while another process holds it; `busy` is called on each refusal. */
async function lockFd(fd: number, what: string, busy: () => void, pollMs: number): Promise<void> {
  for (;;) {
    if (sys.flock(fd, LOCK_EX | LOCK_NB) === 0) return;
    const errno = sys.errno();
    if (errno !== EWOULDBLOCK) throw new Error(`cannot lock ${what}: ${errnoName(errno)}`);
    busy();
    await new Promise((r) => setTimeout(r, pollMs));
  }
}

/** The PID file, locked after the directory; on a read-only state dir it is only read (and locked all the same). */
function openPidFile(path: string): number {
  try {
    return openSync(path, 'a+', 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EROFS') throw e;
    return openSync(path, 'r');
  }
}

/** The PID is for the log of a daemon that waits: a full disk must not stop this one from starting. */
function writePid(fd: number): void {
  try {
    ftruncateSync(fd, 0);
    writeSync(fd, `${process.pid}\n`, 0);
  } catch {
    /* a waiting daemon asks /proc/locks instead */
  }
}

/**
 * Takes the lock, waiting (without blocking the event loop) while another daemon holds it; `waiting` is told once,
 * with the holder's PID, so the log says why start-up pauses.
 */
export async function acquireInstanceLock(
  stateDir: string,
  waiting: (holderPid: string) => void,
  pollMs = 50,
): Promise<InstanceLock> {
  const pidFile = join(stateDir, 'plexusd.lock');
  let told = false;
  const busy = (): void => {
    if (told) return;
    told = true;
    waiting(holderOf(pidFile, stateDir));
  };
  const dirFd = openSync(stateDir, constants.O_RDONLY | constants.O_DIRECTORY);
  let fileFd: number | undefined;
  try {
    await lockFd(dirFd, stateDir, busy, pollMs);
    fileFd = openPidFile(pidFile);
    await lockFd(fileFd, pidFile, busy, pollMs);
    writePid(fileFd);
  } catch (e) {
    if (fileFd !== undefined) closeSync(fileFd);
    closeSync(dirFd);
    throw e;
  }
  const held = fileFd;
  return {
    release: () => {
      closeSync(held);
      closeSync(dirFd);
    },
  };
}
