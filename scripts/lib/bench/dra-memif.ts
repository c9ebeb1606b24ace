/**
 * bench:dra's memif case: a memif device (a socket directory and a secret, no switch and no network) given to a pod by
 * the device plugin (resources.limits) or by a claim (a ResourceClaimTemplate of class memif.plexus.io, which reaches
 * the container through the CDI spec plexusd writes at Prepare: containerd 2 only). What each pod's container got is
 * read back from containerd, so a pod counts only when it has MEMIF_SOCKET and the socket directory mounted.
 */
import { join } from 'node:path';
import { PAUSE_IMAGE } from '../../../test/support/kube-node';
import type { SingleNode } from '../../../test/support/cluster/single-node';

export const DRA_MEMIF = 'plexus.io/dramemif';
export const DP_MEMIF = 'plexus.io/dpmemif';
export const MEMIF_TEMPLATE = 'memifclaim';

/** The two memif resources of plexusd's resources file, `count` devices each, one offered per path. */
export const memifResources = (work: string, count: number): unknown[] => [
  { name: DRA_MEMIF, kind: 'memif', count, socketDir: join(work, 'memif-dra'), offer: ['dra'] },
  { name: DP_MEMIF, kind: 'memif', count, socketDir: join(work, 'memif-dp'), offer: ['device-plugin'] },
];

/** One memif device of the DRA resource, with no opaque config: no network, only what the container is given. */
export const memifTemplate = (namespace: string): unknown => ({
  apiVersion: 'resource.k8s.io/v1',
  kind: 'ResourceClaimTemplate',
  metadata: { name: MEMIF_TEMPLATE, namespace },
  spec: {
    spec: {
      devices: {
        requests: [
          {
            name: 'nic',
            exactly: {
              deviceClassName: 'memif.plexus.io',
              selectors: [
                { cel: { expression: `device.attributes["k8s.cni.cncf.io"].resourceName == "${DRA_MEMIF}"` } },
              ],
            },
          },
        ],
      },
    },
  },
});

/** A pod given one memif device of the device-plugin resource, and no secondary network. */
export const memifDevicePluginPod = (namespace: string, name: string): unknown => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace },
  spec: {
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    terminationGracePeriodSeconds: 1,
    containers: [
      { name: 'c', image: PAUSE_IMAGE, imagePullPolicy: 'Never', resources: { limits: { [DP_MEMIF]: '1' } } },
    ],
  },
});

/** How many of the pods' containers have MEMIF_SOCKET and a mount under /run/memif (what the device plugin gives). */
export async function withMemif(node: SingleNode, namespace: string, names: readonly string[]): Promise<number> {
  let n = 0;
  for (const name of names) {
    const seen = await node.containerSpec(namespace, name);
    const socket = seen.env.get('MEMIF_SOCKET');
    if (socket !== undefined && seen.mounts.some((m) => m.destination.startsWith('/run/memif/'))) n++;
  }
  return n;
}
