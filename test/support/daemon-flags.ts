/**
 * plexusd's command line for a test, built from named settings: `daemonFlags({ kubeconfig, nodeName: NODE })` is
 * `['--kubeconfig', kubeconfig, '--node-name', NODE]`. The names are those of the daemon's own settings (src/node/config.ts
 * maps each flag to one), so a misspelt or removed flag fails the build, not a daemon's start in the middle of a test.
 */
import { type DaemonConfig, FLAGS } from '../../src/node/config';

/** A setting's value on the command line: lists are comma-separated, numbers and booleans written out. */
export type FlagValue = string | number | boolean | readonly string[];

/** plexusd's settings by name, as a test sets them; `config` is the settings file (--config). Unset ones are left out. */
export type DaemonSettings = { readonly [K in keyof DaemonConfig | 'config']?: FlagValue | undefined };

const flagOf = (setting: string): string => {
  if (setting === 'config') return '--config';
  const flag = Object.keys(FLAGS).find((f) => FLAGS[f] === setting);
  if (flag === undefined) throw new Error(`plexusd has no flag for the setting ${setting} (src/node/config.ts FLAGS)`);
  return flag;
};

const written = (value: FlagValue): string => (Array.isArray(value) ? value.join(',') : String(value));

/** The flags that set `settings`, in the order they are named. */
export function daemonFlags(settings: DaemonSettings): string[] {
  return Object.entries(settings).flatMap(([setting, value]) =>
    value === undefined ? [] : [flagOf(setting), written(value)],
  );
}
