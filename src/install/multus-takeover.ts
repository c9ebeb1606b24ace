/**
 * Taking a node's runtime over from Multus, and giving it back. Multus's config sorts before Plexus's, so the runtime
 * calls Multus while it is there: once plexusd serves (its conflist is written), Multus's config is renamed to a name
 * no runtime loads, in the same directory (one rename: the runtime sees Multus's config or Plexus's, never neither).
 * `plexus-install uninstall` renames it back: the same bytes, mode and owner.
 */
import { existsSync, readdirSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { listConfFiles, readConfFile } from './conf-files';
import { findMultusConfigs } from './multus-config';
import { errorMessage } from '../common/error-message';

/** What a moved-aside Multus config is called: a suffix no runtime loads (libcni reads .conf, .conflist, .json). */
export const MOVED_ASIDE_SUFFIX = '.plexus-moved';

/** Moves every Multus config of the conf dir aside; returns the new paths. */
export function moveMultusAside(confDir: string): string[] {
  const moved: string[] = [];
  for (const { path } of findMultusConfigs(listConfFiles(confDir) ?? [])) {
    renameSync(path, `${path}${MOVED_ASIDE_SUFFIX}`);
    moved.push(`${path}${MOVED_ASIDE_SUFFIX}`);
  }
  return moved;
}

export interface Restored {
  readonly restored: readonly string[];
  /** Moved-aside configs left where they are, because a config of that name is back already. */
  readonly kept: readonly string[];
}

/** Puts moved-aside Multus configs back under their names, unless a file of that name exists again. */
export function restoreMultus(confDir: string): Restored {
  const restored: string[] = [];
  const kept: string[] = [];
  let names: string[];
  try {
    names = readdirSync(confDir);
  } catch {
    return { restored, kept };
  }
  for (const name of names.filter((n) => n.endsWith(MOVED_ASIDE_SUFFIX)).sort()) {
    const moved = join(confDir, name);
    const original = moved.slice(0, -MOVED_ASIDE_SUFFIX.length);
    const file = readConfFile(moved);
    if (file.kind !== 'file' || findMultusConfigs([{ path: moved, read: () => file.text }]).length === 0) continue;
    if (existsSync(original)) {
      kept.push(moved);
      continue;
    }
    renameSync(moved, original);
    restored.push(original);
  }
  return { restored, kept };
}

/**
 * What plexusd does once its conflist is written, without `takeOverMultus`: a Multus config still there is reported
 * (the runtime keeps calling Multus).
 */
export function reportMultusServing(confDir: string, log: Logger): void {
  const multus = findMultusConfigs(listConfFiles(confDir) ?? []);
  if (multus.length)
    log.warn(
      { multus: multus.map((m) => m.path) },
      "Multus's config sorts first: the runtime calls Multus, not Plexus, for new pods (set takeOverMultus: docs/migrate-from-multus.md)",
    );
}

/**
 * What stops a takeover: what the IPAM of the pods Multus made holds, where plexusd cannot read it (each problem a
 * sentence naming the path). Taking over then could give their addresses to new pods.
 */
export type TakeoverBlockers = () => readonly string[];

const BLOCKED =
  "Multus's config stays, the runtime keeps calling Multus: plexusd cannot read what the IPAM of the pods Multus made holds, so it could give their addresses to new pods; it takes over once these are fixed";

/**
 * With `takeOverMultus`: Multus's configs go aside and the runtime calls Plexus for new sandboxes, unless a blocker
 * says plexusd cannot hold what Multus's pods hold. Then Multus keeps the node, the log and `problems()` (for
 * /readyz) say why, and the next `attempt` tries again.
 */
export class MultusTakeover {
  private blocked: readonly string[] = [];

  constructor(
    private readonly confDir: string,
    private readonly log: Logger,
    private readonly blockers: TakeoverBlockers,
  ) {}

  /** Why the takeover has not happened, empty once it has (or while nothing stops it). */
  problems(): readonly string[] {
    return this.blocked;
  }

  /** Tries to take the node over; true when Multus's config is aside (or there was none), false to try again. */
  attempt(): boolean {
    if (findMultusConfigs(listConfFiles(this.confDir) ?? []).length === 0) return this.done();
    const problems = this.blockers();
    if (problems.length > 0) {
      if (problems.join('\n') !== this.blocked.join('\n')) this.log.error({ problems }, BLOCKED);
      this.blocked = problems;
      return false;
    }
    try {
      const moved = moveMultusAside(this.confDir);
      if (moved.length)
        this.log.info(
          { moved },
          "Multus's config moved aside: the runtime calls Plexus for new pods (plexus-install uninstall puts it back)",
        );
    } catch (e) {
      const message = "cannot move Multus's config aside: the runtime keeps calling Multus for new pods";
      this.log.error({ err: e, confDir: this.confDir }, message);
      this.blocked = [`${message}: ${errorMessage(e)}`];
      return false;
    }
    return this.done();
  }

  private done(): boolean {
    if (this.blocked.length > 0) this.log.info("Multus's takeover is no longer blocked");
    this.blocked = [];
    return true;
  }
}
