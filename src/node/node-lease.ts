/**
 * plexusd's node lease (src/k8s/node-lease.ts), wired: its namespace (the service account's, else kube-system), an
 * identity for this process, the identity of the state directory's previous process (so a restart takes its own
 * lease back at once instead of waiting it out as another daemon's), and the metric that shows a conflict.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { Gauge, type Registry } from 'prom-client';
import type { KubeApiClient } from '../k8s/api-client';
import { NodeLeases } from '../k8s/node-lease';
import { definedFields } from '../common/defined-fields';
import { VtepLeases } from '../k8s/vtep-leases';

const SERVICE_ACCOUNT_NAMESPACE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';
/** The file in the state directory that names the identity the last plexusd on it held the lease under. */
const HOLDER_FILE = 'node-lease-holder';

/** The namespace plexusd runs in: its service account's, else kube-system (where deploy/ puts it). */
function namespaceOf(): string {
  try {
    return readFileSync(SERVICE_ACCOUNT_NAMESPACE, 'utf8').trim() || 'kube-system';
  } catch {
    return 'kube-system';
  }
}

/** The previous process's identity (if any), and this process's, recorded for the next one. */
function identities(stateDir: string): { identity: string; predecessor?: string } {
  const path = join(stateDir, HOLDER_FILE);
  let predecessor: string | undefined;
  try {
    predecessor = readFileSync(path, 'utf8').trim() || undefined;
  } catch {
    /* the first plexusd on this state directory */
  }
  const identity = `${hostname()}/${process.pid}/${randomBytes(4).toString('hex')}`;
  writeFileSync(`${path}.tmp`, `${identity}\n`, { mode: 0o600 });
  renameSync(`${path}.tmp`, path);
  return { identity, ...definedFields({ predecessor: predecessor || undefined }) };
}

export function nodeLeaseFor(
  client: KubeApiClient,
  node: string,
  stateDir: string,
  durationSeconds: number,
  log: Logger,
): NodeLeases {
  return new NodeLeases(
    client,
    { node, namespace: namespaceOf(), durationMs: durationSeconds * 1000, ...identities(stateDir) },
    log.child({ component: 'node-lease' }),
  );
}

/** plexus_node_lease_conflict on /metrics. */
export function leaseMetric(leases: NodeLeases, registry: Registry): void {
  new Gauge({
    name: 'plexus_node_lease_conflict',
    help: "1 while another plexusd holds and renews this node's lease (two daemons with one node name): cluster IPAM refuses to allocate",
    registers: [registry],
    collect() {
      this.set(leases.contested ? 1 : 0);
    },
  });
}

/** Where this node publishes its cluster-mode VTEPs and finds its peers': the node Leases of its namespace. */
export function vtepLeasesFor(client: KubeApiClient, node: string, log: Logger): VtepLeases {
  return new VtepLeases(client, { node, namespace: namespaceOf() }, log.child({ component: 'vtep-leases' }));
}
