/**
 * plexus-install: puts Plexus on a node's container runtime, and takes it off again. The DaemonSet runs `install` as
 * its init container; plexusd itself writes the conflist once it is ready (--install-cni-config), so the runtime
 * never sends a pod to a daemon that cannot answer. `uninstall` (deploy/uninstall/) gives the node back its own config.
 *
 *   install    copy the shim into the CNI bin dir (write-then-rename); find the node's primary CNI config (the file
 *              the runtime would pick without Plexus) and point --default-network-link at it; wait for one to appear
 *   uninstall  remove Plexus's conflist and the shim: the runtime goes back to the primary config
 */
import { mkdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import pino from 'pino';
import { findPrimaryConfig, installShim, linkFile, PLEXUS_CONFLIST, uninstall } from './cni-conf';
import { DEFAULT_MULTUS_DAEMON_CONFIG } from './multus-config';
import { importMultus } from './multus-import';
import { restoreMultus } from './multus-takeover';
import { errorMessage } from '../common/error-message';

export const INSTALL_USAGE = `usage: plexus-install install [flags]     install the shim, find the primary CNI config
       plexus-install uninstall [flags]   remove Plexus's conflist and the shim
  --cni-bin-dir DIR            the runtime's CNI bin dir (default /opt/cni/bin)
  --cni-conf-dir DIR           the runtime's CNI conf dir (default /etc/cni/net.d)
  --shim FILE                  the plexus-cni binary to install (default: the one beside this program)
  --default-network-link PATH  symlink to the primary config, for plexusd --default-network
                               (default /var/lib/plexus/default-network)
  --wait-seconds S             how long install waits for a primary config to appear; 0: forever (default 0)
  --imported-config FILE       where Multus's settings are carried over to, for plexusd's importedConfig
                               (default /var/lib/plexus/imported-config.json)
  --multus-daemon-config FILE  thick Multus's daemon config (default ${DEFAULT_MULTUS_DAEMON_CONFIG})`;

interface InstallFlags {
  readonly command: 'install' | 'uninstall';
  readonly cniBinDir: string;
  readonly cniConfDir: string;
  readonly shim: string;
  readonly link: string;
  readonly waitSeconds: number;
  readonly importedConfig: string;
  readonly multusDaemonConfig: string;
}

type Parsed = { kind: 'flags'; flags: InstallFlags } | { kind: 'help' } | { kind: 'error'; message: string };

export function parseInstallArgs(argv: readonly string[]): Parsed {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      options: {
        'cni-bin-dir': { type: 'string', default: '/opt/cni/bin' },
        'cni-conf-dir': { type: 'string', default: '/etc/cni/net.d' },
        shim: { type: 'string', default: resolve(__dirname, '../../../bin/plexus-cni') },
        'default-network-link': { type: 'string', default: '/var/lib/plexus/default-network' },
        'wait-seconds': { type: 'string', default: '0' },
        'imported-config': { type: 'string', default: '/var/lib/plexus/imported-config.json' },
        'multus-daemon-config': { type: 'string', default: DEFAULT_MULTUS_DAEMON_CONFIG },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (e) {
    return { kind: 'error', message: errorMessage(e) };
  }
  const { values, positionals } = parsed;
  if (values.help) return { kind: 'help' };
  const command = positionals[0];
  if (positionals.length !== 1 || (command !== 'install' && command !== 'uninstall'))
    return { kind: 'error', message: 'expected one command: install or uninstall' };
  for (const key of [
    'cni-bin-dir',
    'cni-conf-dir',
    'shim',
    'default-network-link',
    'imported-config',
    'multus-daemon-config',
  ] as const) {
    if (!values[key].startsWith('/')) return { kind: 'error', message: `--${key} must be an absolute path` };
  }
  const waitSeconds = Number(values['wait-seconds']);
  if (!Number.isFinite(waitSeconds) || waitSeconds < 0 || values['wait-seconds'] === '')
    return { kind: 'error', message: '--wait-seconds must be a number of seconds, 0 or more' };
  return {
    kind: 'flags',
    flags: {
      command,
      cniBinDir: values['cni-bin-dir'],
      cniConfDir: values['cni-conf-dir'],
      shim: values.shim,
      link: values['default-network-link'],
      waitSeconds,
      importedConfig: values['imported-config'],
      multusDaemonConfig: values['multus-daemon-config'],
    },
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function runInstall(
  argv: readonly string[],
  log = pino({ base: { svc: 'plexus-install' } }, pino.destination(2)),
): Promise<number> {
  const parsed = parseInstallArgs(argv);
  if (parsed.kind === 'help') {
    process.stdout.write(`${INSTALL_USAGE}\n`);
    return 0;
  }
  if (parsed.kind === 'error') {
    process.stderr.write(`plexus-install: ${parsed.message}\n${INSTALL_USAGE}\n`);
    return 2;
  }
  const f = parsed.flags;
  if (f.command === 'uninstall') {
    // Multus first: its config sorts before Plexus's, so the runtime goes back to it at once.
    const multus = restoreMultus(f.cniConfDir);
    if (multus.restored.length)
      log.info({ restored: multus.restored }, "Multus's config is back: the runtime calls Multus for new pods");
    for (const kept of multus.kept)
      log.warn({ kept }, 'a moved-aside Multus config was left where it is: a config of its name exists again');
    rmSync(f.importedConfig, { force: true });
    const removed = uninstall(f.cniConfDir, f.cniBinDir);
    log.info(
      { removed },
      removed.length ? "uninstalled: the runtime uses the node's own CNI config for new pods" : 'nothing to uninstall',
    );
    return 0;
  }

  mkdirSync(f.cniBinDir, { recursive: true, mode: 0o755 });
  const changed = installShim(f.shim, f.cniBinDir);
  log.info(
    { shim: join(f.cniBinDir, 'plexus-cni'), changed },
    changed ? 'installed the shim' : 'the shim is up to date',
  );

  const multus = importMultus(
    {
      cniConfDir: f.cniConfDir,
      daemonConfig: f.multusDaemonConfig,
      importedConfig: f.importedConfig,
      defaultNetworkLink: f.link,
    },
    log,
  );
  if (multus.kind === 'failed') return 1;
  // Multus's cluster network as a NAD needs no file here; as a file, importMultus linked it.
  if (multus.kind === 'imported') return 0;

  // The cluster's own network plugin may write its config after Plexus starts: wait for it, as the runtime does.
  const deadline = f.waitSeconds > 0 ? Date.now() + f.waitSeconds * 1000 : Infinity;
  let lastLog = 0;
  for (;;) {
    const primary = findPrimaryConfig(f.cniConfDir);
    if (!primary.ok) {
      log.error({ confDir: f.cniConfDir }, primary.error.message);
      return 1;
    }
    if (primary.value) {
      mkdirSync(dirname(f.link), { recursive: true, mode: 0o700 });
      linkFile(f.link, primary.value.path);
      log.info(
        {
          primary: primary.value.path,
          network: primary.value.name,
          cniVersion: primary.value.cniVersion,
          link: f.link,
        },
        "the node's primary CNI config is the cluster default network",
      );
      return 0;
    }
    if (Date.now() >= deadline) {
      log.error(
        { confDir: f.cniConfDir },
        `no CNI config other than ${PLEXUS_CONFLIST} in ${f.cniConfDir}: install the cluster's network plugin first`,
      );
      return 1;
    }
    if (Date.now() - lastLog > 30000) {
      log.info({ confDir: f.cniConfDir }, "waiting for the node's primary CNI config");
      lastLog = Date.now();
    }
    await sleep(500);
  }
}
