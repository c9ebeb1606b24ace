/**
 * The KubeletConfiguration every test node runs with (each node of the test cluster, one node or
 * many): client certificates from the API's CA, cgroupfs without systemd, the host's iptables and the
 * local-only images left alone. cluster/node-config.ts adds what is each node's own (address, cgroup
 * root, static pods).
 */
import { join } from 'node:path';

export interface KubeletBase {
  /** Where the kubelet serves (and the API server dials it for logs and exec). */
  readonly address: string;
  /** The API's CA, which signs the clients the kubelet lets in. */
  readonly clientCa: string;
  /** The directory of the kubelet's serving certificate (kubelet-server.crt, .key). */
  readonly certsDir: string;
  readonly containerdSocket: string;
  /** Not /var/log/pods: the node's own. */
  readonly podLogsDir: string;
}

export function kubeletConfigBase(node: KubeletBase): Record<string, unknown> {
  return {
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    address: node.address,
    healthzBindAddress: '127.0.0.1',
    authentication: {
      anonymous: { enabled: false },
      webhook: { enabled: true },
      x509: { clientCAFile: node.clientCa },
    },
    authorization: { mode: 'Webhook' },
    tlsCertFile: join(node.certsDir, 'kubelet-server.crt'),
    tlsPrivateKeyFile: join(node.certsDir, 'kubelet-server.key'),
    containerRuntimeEndpoint: `unix://${node.containerdSocket}`,
    cgroupDriver: 'cgroupfs', // no systemd as PID 1
    failCgroupV1: false,
    failSwapOn: false,
    makeIPTablesUtilChains: false, // leave the host's iptables alone
    hairpinMode: 'none',
    imageGCHighThresholdPercent: 100, // never collect the local-only images
    imageGCLowThresholdPercent: 99,
    evictionHard: {
      'memory.available': '100Mi',
      'nodefs.available': '1%',
      'imagefs.available': '1%',
      'nodefs.inodesFree': '1%',
    },
    clusterDomain: 'cluster.local',
    clusterDNS: ['10.244.240.10'],
    resolvConf: '/etc/resolv.conf',
    serializeImagePulls: false,
    maxPods: 250,
    podLogsDir: node.podLogsDir,
  };
}
