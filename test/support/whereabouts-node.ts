/**
 * A simulated node for the Whereabouts tests: plexusd on a real API server with Multus's config in its conf dir and
 * takeOverMultus set, /readyz on a TCP port; and what its takeover check says. Pods' ADDs and DELs on a macvlan
 * network whose master is a veth the test made.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DaemonFixture, httpGet, type ShimOutput } from './daemon';
import type { KubeApiFixture } from './k8s';

export interface TakeoverNode {
  readonly daemon: DaemonFixture;
  readonly port: number;
  /** Whether Multus's config is still where the runtime loads it. */
  multusServes(): boolean;
  /** /readyz's status and its multusTakeover check ('ok' when it passes). */
  takeoverCheck(): Promise<{ status: number; takeover: string }>;
}

/** plexusd for `node` as `user`, default network `base`; not started. */
export function takeoverNode(api: KubeApiFixture, user: string, node: string): TakeoverNode {
  const port = 20000 + Math.floor(Math.random() * 20000);
  const daemon = new DaemonFixture('base', [
    '--kubeconfig',
    api.userKubeconfig(user),
    '--node-name',
    node,
    '--cni-bin-dir',
    '/usr/lib/cni',
    '--orphan-sweep-seconds',
    '0',
    '--metrics-address',
    `127.0.0.1:${port}`,
  ]);
  const confDir = join(daemon.dir, 'net.d');
  const multusConf = join(confDir, '00-multus.conf');
  mkdirSync(confDir, { recursive: true });
  writeFileSync(multusConf, JSON.stringify({ cniVersion: '1.0.0', name: 'multus', type: 'multus' }));
  daemon.addFlags('--install-cni-config', join(confDir, '00-plexus.conflist'), '--take-over-multus', 'true');
  return {
    daemon,
    port,
    multusServes: () => existsSync(multusConf),
    takeoverCheck: async () => {
      const got = await httpGet({ host: '127.0.0.1', port, path: '/readyz' });
      const checks = (JSON.parse(got.body) as { checks?: Record<string, string> }).checks ?? {};
      return { status: got.status, takeover: checks.multusTakeover ?? 'ok' };
    },
  };
}

/** A pod: its container ID and netns path. */
export interface WherePod {
  readonly cid: string;
  readonly netns: string;
}

/** One CNI call of a pod in `default`, its networks in the runtime's pod annotations. */
export function podCallOn(
  daemon: DaemonFixture,
  command: 'ADD' | 'DEL',
  pod: WherePod,
  networks: string,
): Promise<ShimOutput> {
  return daemon.cni({
    command,
    containerId: pod.cid,
    netns: pod.netns,
    ifname: 'eth0',
    args: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_INFRA_CONTAINER_ID=${pod.cid}`,
    config: daemon.runtimeConfig(
      { runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': networks } } },
      '1.0.0',
    ),
  });
}

/** A macvlan NAD's config on `master`, offering the ips capability. */
export const macvlanOn = (master: string, name: string, ipam: Record<string, unknown>): string =>
  JSON.stringify({
    cniVersion: '1.0.0',
    name,
    type: 'macvlan',
    master,
    mode: 'bridge',
    capabilities: { ips: true },
    ipam,
  });
