/**
 * A node's death to its addresses handed to new pods, on the three-node test cluster: the scenario of
 * test/cluster/ipam.test.ts (test/support/cluster/node-death.ts), timed instead of asserted. A small pool (a /28 in
 * /30 blocks) is held whole, the victim's ReplicaSet pods holding its last addresses; the victim is killed and its
 * Node object deleted; the replacements, on another node, can only get the victim's addresses, and only once its
 * node Lease has expired and the grace has passed.
 */
import type { TestCluster } from '../../../test/support/cluster/cluster';
import type { ClusterNode } from '../../../test/support/cluster/node';
import {
  awaitReuse,
  holdWholePool,
  killNode,
  macvlanPoolNad,
  type ScarcePool,
} from '../../../test/support/cluster/node-death';
import { labelNode } from '../../../test/support/cluster/pods';
import { loadAverage } from '../host';
import { round } from '../stats';

export interface ReuseTiming {
  /** plexusd's --node-lease-seconds and --ipam-node-grace-seconds on every node. */
  readonly leaseSeconds: number;
  readonly graceSeconds: number;
}

export interface ReuseReport extends ReuseTiming {
  readonly replicas: number;
  /** The earliest a reuse is allowed, from the death: the grace plus the Lease's last third at most unrenewed. */
  readonly earliestAllowedSeconds: number;
  /** From the death to the first replacement with one of its addresses, and to all of them. */
  readonly firstReusedSeconds: number;
  readonly allReusedSeconds: number;
  /** Replacements seen with one of its addresses before the earliest allowed (must be 0). */
  readonly tooEarly: number;
  readonly load: { readonly start: number; readonly end: number };
}

const REPLICAS = 4;

export async function timeNodeDeathReuse(
  c: TestCluster,
  options: ReuseTiming & { readonly namespace: string; readonly log: (line: string) => void },
): Promise<ReuseReport> {
  const { leaseSeconds, graceSeconds, namespace, log } = options;
  const load = { start: loadAverage(), end: NaN };
  const o = 100 + Math.floor(Math.random() * 40);
  const plan: ScarcePool = {
    namespace,
    network: 'scarce',
    subnet: `10.${o}.${Math.floor(Math.random() * 250)}.0/28`,
    replicas: REPLICAS,
    nodeLabel: 'plexus.bench/scarce',
  };
  const made = await c.api.createNad(namespace, plan.network, macvlanPoolNad(plan.network, plan.subnet, 30));
  if (made.status !== 201) throw new Error(`NAD ${plan.network}: ${made.status} ${JSON.stringify(made.body)}`);
  const [victim, holder, heir] = c.nodes as [ClusterNode, ClusterNode, ClusterNode];
  const { first, deadBlocks } = await holdWholePool(c.api, plan, { victim, holder });
  await labelNode(c.api, heir.name, plan.nodeLabel, 'yes');
  log(`node death: ${victim.name} killed, its blocks ${deadBlocks.join(' ')}`);
  const diedAt = await killNode(c.api, { victim, namespace, pods: first.map((a) => a.pod) });
  const earliest = diedAt + (graceSeconds + (leaseSeconds * 2) / 3) * 1000;
  let firstAt: number | undefined;
  let tooEarly = 0;
  const done = await awaitReuse(c.api, plan, { victim, deadBlocks }, ({ reused }) => {
    if (reused.length === 0) return;
    firstAt ??= Date.now();
    if (Date.now() < earliest) tooEarly = Math.max(tooEarly, reused.length);
  });
  load.end = loadAverage();
  const since = (t: number): number => round((t - diedAt) / 1000, 1);
  return {
    leaseSeconds,
    graceSeconds,
    replicas: REPLICAS,
    earliestAllowedSeconds: since(earliest),
    firstReusedSeconds: since(firstAt ?? done.at),
    allReusedSeconds: since(done.at),
    tooEarly,
    load,
  };
}
