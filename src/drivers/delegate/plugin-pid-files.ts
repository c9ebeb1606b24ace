/**
 * The running delegated plugins on disk: one empty file per plugin in plexusd's state directory, named
 * `<pid>-<start>` (start: the process's start time in clock ticks since boot, field 22 of /proc/<pid>/stat). A plexusd
 * that dies without its stop (SIGKILL, the OOM killer) leaves them for the next one, which kills what is still
 * running before its recovery undoes their calls: a PID alone could name another process by then, a PID and its start
 * time cannot. Written without fsync: a daemon's crash keeps the page cache, and a node's reboot ends the plugins too.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** A plugin a previous plexusd left running, as its file names it. */
export interface LeftPlugin {
  readonly pid: number;
  readonly start: number;
  readonly file: string;
}

const FILE_NAME = /^([1-9]\d{0,9})-(\d{1,20})$/;

export class PluginPidFiles {
  /** A directory that cannot be made (a file in its place) only costs the notes: plugins still run. */
  constructor(private readonly dir: string) {
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
    } catch {
      // add() notes nothing and stillRunning() finds nothing
    }
  }

  /** Notes a started plugin; its file name, or undefined when it is gone already (or the note cannot be written). */
  add(pid: number): string | undefined {
    const start = processStart(pid);
    if (start === undefined) return undefined;
    const file = `${pid}-${start}`;
    try {
      writeFileSync(join(this.dir, file), '', { mode: 0o600 });
      return file;
    } catch {
      return undefined; // best effort: without it, only a crash at this plugin's run would leave it unknown
    }
  }

  remove(file: string): void {
    rmSync(join(this.dir, file), { force: true });
  }

  /** The plugins the files name that still run (the same PID, started at the same time); other files are removed. */
  stillRunning(): LeftPlugin[] {
    const running: LeftPlugin[] = [];
    let files: string[];
    try {
      files = readdirSync(this.dir);
    } catch {
      return running;
    }
    for (const file of files) {
      const m = FILE_NAME.exec(file);
      const left = m ? { pid: Number(m[1]), start: Number(m[2]), file } : undefined;
      if (left && processStart(left.pid) === left.start) running.push(left);
      else rmSync(join(this.dir, file), { force: true, recursive: true });
    }
    return running;
  }
}

/** The process's start time (clock ticks since boot), or undefined when there is no such process (or a zombie). */
export function processStart(pid: number): number | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name, in parentheses, may hold any character: the fields are counted after its last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[0] === 'Z') return undefined;
  const start = Number(fields[19]);
  return Number.isSafeInteger(start) ? start : undefined;
}
