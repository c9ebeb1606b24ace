/** plexusd: the Plexus node daemon. */
import { mkdir } from 'node:fs/promises';
import { join, dirname } from 'node:path';
import pino from 'pino';
import { DriverRegistry } from '../drivers/registry';
import { Ipam } from '../ipam';
import { Kernel } from '../kernel/kernel';
import { CniConfDir } from '../networks/conf-dir';
import { NetworkDirectory } from '../networks/directory';
import type { NetworkSource } from '../networks/source';
import type { StatusSink } from '../engine/status-sink';
import { AttachmentEngine } from '../engine/engine';
import { loadDaemonConfig, USAGE } from './config';
import { Journal } from '../engine/journal';
import { acquireInstanceLock } from './instance-lock';
import { recover, replaySpooledDels } from '../engine/recovery';
import { DaemonServer } from '../api/server';

async function main(): Promise<number> {
  const outcome = loadDaemonConfig(process.argv.slice(2));
  if (outcome.kind === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (outcome.kind === 'error') {
    process.stderr.write(`plexusd: ${outcome.message}\n${USAGE}\n`);
    return 2;
  }
  const config = outcome.config;
  const log = pino({ level: config.logLevel, base: { svc: 'plexusd' } }, pino.destination(2));

  // A daemon being replaced finishes its calls first; recovering the journal before that would undo them.
  await mkdir(config.stateDir, { recursive: true, mode: 0o700 });
  const lock = await acquireInstanceLock(config.stateDir, (holder) => log.info({ holder }, 'waiting for the previous plexusd to finish its calls'));
  const kernel = new Kernel(config.kernelThreads);
  const ipam = await Ipam.open(join(config.stateDir, 'ipam'), { sync: config.stateSync });
  const journal = await Journal.open(join(config.stateDir, 'journal'), config.stateSync);
  // With an API, NADs come from it (loaded before the daemon says it is ready); standalone, from the directory.
  // The client library is loaded only where an API may be configured: a standalone node does not pay for it.
  const k8s = config.kubeconfig !== undefined || process.env.KUBERNETES_SERVICE_HOST ? await import('../k8s/kubeconfig') : undefined;
  const kubeconfig = k8s ? k8s.loadKubeConfig(config.kubeconfig) : { ok: true as const, value: undefined };
  if (!kubeconfig.ok) throw new Error(kubeconfig.error.message);
  let apiNetworks: { start(): Promise<void>; stop(): Promise<void> } | undefined;
  let statusWriter: (StatusSink & { settled(): Promise<void> }) | undefined;
  let networks: NetworkSource = new NetworkDirectory(config.networksDir, { cniConfDir: config.cniConfDir });
  if (k8s && kubeconfig.value) {
    const { ApiNetworkSource } = await import('../k8s/nad-source');
    const source = new ApiNetworkSource(kubeconfig.value, new CniConfDir(config.cniConfDir), (e) => log.warn({ err: (e as Error).message }, 'watching NetworkAttachmentDefinitions failed; retrying'));
    networks = source;
    apiNetworks = source;
    const { ApiStatusWriter } = await import('../k8s/status-writer');
    statusWriter = new ApiStatusWriter(kubeconfig.value, log);
    log.info({ server: kubeconfig.value.getCurrentCluster()?.server, node: k8s.nodeNameOf(config.nodeName) }, 'NetworkAttachmentDefinitions come from the Kubernetes API');
  }
  const engine = new AttachmentEngine(kernel, ipam, journal, networks, new DriverRegistry(), {
    cniBinDir: config.cniBinDir,
    naming: config.naming,
    selectionAnnotation: config.selectionAnnotation,
    defaultNetworks: config.defaultNetworks,
    limits: { interfacesPerPod: config.maxInterfacesPerPod, annotationBytes: config.maxAnnotationBytes },
    maxNodeAttachments: config.maxNodeAttachments,
    ...(config.defaultNetwork ? { defaultNetwork: config.defaultNetwork } : {}),
    ...(config.hostLinkGroup !== undefined ? { hostLinkGroup: config.hostLinkGroup } : {}),
    ...(statusWriter ? { statusSink: statusWriter } : {}),
  }, log);
  const state = { ready: false };
  const server = new DaemonServer({ socketPath: config.socket, maxConcurrent: config.maxConcurrent, maxQueued: config.maxQueued }, engine, state, log);

  // Listen first (answering 503 while recovering) so plexus-cni waits instead of spooling or failing.
  await server.listen();
  const spoolDir = join(dirname(config.socket), 'pending-del');
  const report = await recover(spoolDir, engine, log);
  await apiNetworks?.start();
  state.ready = true;
  log.info({ socket: config.socket, stateDir: config.stateDir, networksDir: config.networksDir, ...report }, 'plexusd ready');

  // DELs spooled while the daemon was briefly unreachable (or answering 503) are replayed without a restart.
  let scanning = false;
  const spoolTimer = setInterval(() => {
    if (scanning) return;
    scanning = true;
    replaySpooledDels(spoolDir, engine, log)
      .catch((e: unknown) => log.error({ err: e }, 'spool scan failed'))
      .finally(() => {
        scanning = false;
      });
  }, config.spoolScanSeconds * 1000);

  await new Promise<void>((resolve) => {
    const stop = (signal: string): void => {
      log.info({ signal }, 'stopping');
      resolve();
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  clearInterval(spoolTimer);
  state.ready = false;
  const cut = await server.close(config.drainSeconds * 1000);
  if (cut) log.warn({ cut, drainSeconds: config.drainSeconds }, 'calls still running after the drain time were cut off; plexus-cni retries them');
  else log.info('drained: every accepted call was answered');
  // Status writes still retrying get the rest of the drain time, no more: the next daemon's ADDs write their own.
  if (statusWriter) await Promise.race([statusWriter.settled(), new Promise((r) => setTimeout(r, 2000))]);
  await apiNetworks?.stop();
  await kernel.close();
  lock.release();
  return 0;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`plexusd: fatal: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  },
);
