/**
 * Multus v4.3.0 thick on the test cluster's nodes, as its DaemonSet runs it (../shared/multus; its service account from
 * grantMultus in ../multus.ts): multus-shim in the plugin dir of each node's runtime, multus-daemon in the node's
 * namespaces with an in-cluster client, writing 00-multus.conf over the node's own config. An in-cluster client reads
 * its token and CA at a fixed path and dials $KUBERNETES_SERVICE_HOST, checking the API's certificate for that name:
 * the daemon gets a mount namespace of its own (a slave of the node's) with a tmpfs on /run holding them, and an
 * /etc/hosts that names the API relay `kubernetes`, a name the certificate carries.
 */
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type MultusAccess, multusBinary } from '../multus';
import { until } from '../until';
import type { ClusterNode } from './node';

const SA_DIR = '/run/secrets/kubernetes.io/serviceaccount';
const DAEMON = 'multus-daemon';

/**
 * The daemon's start: the node's /run/netns is kept (moved under the new /run) as a slave of the node's, made shared
 * first, so the sandboxes' namespaces containerd mounts later reach the daemon, which enters them by path.
 */
function daemonScript(dir: string, config: string): string {
  const kept = join(dir, 'netns-kept');
  return [
    'set -e',
    `mkdir -p ${kept}`,
    `mount --rbind /run/netns ${kept}`,
    'mount -t tmpfs tmpfs /run',
    `mkdir -p /run/netns ${SA_DIR}`,
    `mount --move ${kept} /run/netns`,
    `cp ${join(dir, 'sa', 'token')} ${join(dir, 'sa', 'ca.crt')} ${SA_DIR}/`,
    `mount --bind ${join(dir, 'hosts')} /etc/hosts`,
    `exec ${multusBinary(DAEMON)!} -config ${config}`,
  ].join('\n');
}

/** Thick Multus on one node: started by start(), stopped as its DaemonSet's pod is deleted. */
export class ThickMultus {
  private constructor(
    readonly node: ClusterNode,
    /** The daemon's config file, which plexus-install reads (`--multus-daemon-config`). */
    readonly config: string,
  ) {}

  /** Resolves once the daemon has written 00-multus.conf in the node's CNI conf dir. */
  static async start(node: ClusterNode, access: MultusAccess): Promise<ThickMultus> {
    const shim = multusBinary('multus-shim');
    if (!shim || !multusBinary(DAEMON)) throw new Error('multus-shim and multus-daemon are needed (../shared/multus)');
    copyFileSync(shim, join(node.runtimeCniBinDir, 'multus-shim'));
    const dir = join(node.spec.root, 'multus');
    mkdirSync(join(dir, 'sa'), { recursive: true });
    writeFileSync(join(dir, 'sa', 'token'), access.token, { mode: 0o600 });
    copyFileSync(access.caFile, join(dir, 'sa', 'ca.crt'));
    const api = new URL(node.spec.apiUrl);
    writeFileSync(join(dir, 'hosts'), `127.0.0.1 localhost\n${api.hostname} kubernetes\n`);
    const socketDir = join(node.spec.root, 'run', 'multus');
    const config = join(dir, 'daemon-config.json');
    const settings = {
      cniVersion: '1.0.0',
      logLevel: 'verbose',
      logToStderr: true,
      cniConfigDir: node.paths.cniConfDir,
      multusAutoconfigDir: node.paths.cniConfDir,
      multusConfigFile: 'auto',
      socketDir,
      daemonSocketDir: socketDir,
      cniDir: '/var/lib/cni/multus',
      binDir: node.runtimeCniBinDir,
    };
    writeFileSync(config, JSON.stringify(settings));
    const shared = node.run(['mount', '--make-shared', '/run/netns']);
    if (shared.status !== 0) throw new Error(`making /run/netns shared on ${node.name}: ${shared.out}`);
    const proc = node.spawnDaemon(
      DAEMON,
      ['unshare', '--mount', '--propagation', 'slave', 'sh', '-c', daemonScript(dir, config)],
      { MULTUS_NODE_NAME: node.name, KUBERNETES_SERVICE_HOST: 'kubernetes', KUBERNETES_SERVICE_PORT: api.port },
    );
    const generated = join(node.paths.cniConfDir, '00-multus.conf');
    await until(
      `multus-daemon's 00-multus.conf on ${node.name}`,
      () => {
        if (proc.exitCode !== null) throw new Error(`multus-daemon exited:\n${node.logTail(DAEMON)}`);
        return existsSync(generated) || undefined;
      },
      30000,
      100,
    );
    return new ThickMultus(node, config);
  }

  /** Multus's DaemonSet deleted: its daemon stopped by its PID. */
  stop(): Promise<void> {
    return this.node.stopDaemon(DAEMON);
  }
}
