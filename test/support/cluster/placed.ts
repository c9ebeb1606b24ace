/**
 * Pods placed one per node of the test cluster, and the checks made between them (an address on a network, a TCP
 * exchange), shared by the cluster's data-plane tests.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { stopProcess } from '../processes';
import type { TestCluster } from './cluster';
import type { ClusterNode } from './node';
import { addressesOn, type ApiPod, createPod, NETWORKS, waitRunning } from './pods';

/** A pod the kubelet of `node` runs, with its network namespace as the node sees it. */
export interface PlacedPod {
  readonly node: ClusterNode;
  readonly pod: ApiPod;
  readonly netns: string;
}

/** One pod `<prefix>-<node>` per node, on `networks` (the selection annotation), once all are Running. */
export async function placeOnEveryNode(
  cluster: TestCluster,
  namespace: string,
  prefix: string,
  networks: string,
): Promise<PlacedPod[]> {
  const names = cluster.nodes.map((n) => `${prefix}-${n.name}`);
  for (const [i, n] of cluster.nodes.entries())
    await createPod(cluster.api, namespace, names[i]!, { nodeName: n.name, annotations: { [NETWORKS]: networks } });
  const pods = await waitRunning(cluster.api, namespace, names);
  const placed: PlacedPod[] = [];
  for (const [i, pod] of pods.entries()) {
    const node = cluster.nodes[i]!;
    placed.push({ node, pod, netns: await node.podNetns(namespace, pod.metadata.name) });
  }
  return placed;
}

/** The pod's address on `network` ("namespace/name") as its network-status gives it; fails the test without one. */
export function addressOn(p: PlacedPod, network: string): string {
  const [a] = addressesOn(p.pod, network);
  assert.ok(a, `${p.pod.metadata.name} has an address on ${network}`);
  return a;
}

/** A line each way over TCP between `client` and a server in `server` listening on `to`:`port` (busybox nc). */
export async function assertTcpExchange(client: PlacedPod, server: PlacedPod, to: string, port: number): Promise<void> {
  const listener = server.node.spawnInPod(server.netns, ['busybox', 'nc', '-l', '-p', String(port)]);
  listener.stdin?.write('pong\n'); // kept open: the server answers this once a client connects
  let received = '';
  listener.stdout?.on('data', (d: Buffer) => (received += d.toString()));
  try {
    let reply = { status: null as number | null, out: '' };
    for (let i = 0; i < 20 && !reply.out.includes('pong'); i++) {
      await sleep(250);
      reply = client.node.inPod(client.netns, ['sh', '-c', `echo ping | busybox nc -w 3 ${to} ${port}`]);
    }
    assert.match(reply.out, /pong/, `the client on ${client.node.name} got the server's answer`);
    for (let i = 0; i < 20 && !received.includes('ping'); i++) await sleep(100);
    assert.match(received, /ping/, `the server on ${server.node.name} got the client's line`);
  } finally {
    await stopProcess(listener, 'SIGKILL');
  }
}
