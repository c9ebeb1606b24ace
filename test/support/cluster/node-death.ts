/**
 * A node dying while its pods hold addresses of a small cluster pool, as test/cluster/ipam.test.ts proves it and
 * scripts/cluster-bench.ts times it: a ReplicaSet's pods on the victim, every other address of the pool held by pods
 * of another node, so the replacements can only get the victim's addresses, once its blocks are reclaimed. The
 * victim dies as a machine dies (every process killed) and its Node object is deleted, as an autoscaler would.
 */
import type { KubeApiFixture } from '../k8s';
import { until } from '../until';
import type { ClusterNode } from './node';
import {
  addressesOn,
  type ApiPod,
  createPod,
  createReplicaSet,
  labelNode,
  listPods,
  NETWORKS,
  waitRunning,
} from './pods';

/** A cluster pool on macvlan over each node's uplink0, in blocks of `blockBits` (else /26): one NAD for the cluster. */
export const macvlanPoolNad = (name: string, subnet: string, blockBits?: number): string =>
  JSON.stringify({
    cniVersion: '1.0.0',
    name,
    type: 'macvlan',
    master: 'uplink0',
    mode: 'bridge',
    ipam: { type: 'plexus', ranges: [[{ subnet }]], ...(blockBits ? { blockSize: { v4: blockBits } } : {}) },
  });

export interface IpBlock {
  spec: { pool: string; cidr: string; node: string };
}

/** The blocks of a cluster pool, as the API has them. */
export async function ipBlocks(api: KubeApiFixture, pool: string): Promise<IpBlock[]> {
  const r = await api.request('GET', '/apis/ipam.plexus.io/v1alpha1/ipblocks');
  return (r.body as { items: IpBlock[] }).items.filter((b) => b.spec.pool === pool);
}

const toInt = (a: string): number => a.split('.').reduce((n, x) => n * 256 + Number(x), 0);
const span = (cidr: string): [number, number] => {
  const [base, bits] = cidr.split('/');
  const size = 2 ** (32 - Number(bits));
  const first = Math.floor(toInt(base!) / size) * size;
  return [first, first + size - 1];
};
export const inCidr = (address: string, cidr: string): boolean => {
  const [first, last] = span(cidr);
  return toInt(address) >= first && toInt(address) <= last;
};
/** Addresses a block of `pool` gives: not the pool's network address, gateway (.1) or broadcast. */
export const usableIn = (cidr: string, pool: string): number => {
  const [poolFirst, poolLast] = span(pool);
  const [first, last] = span(cidr);
  return Math.min(last, poolLast - 1) - Math.max(first, poolFirst + 2) + 1;
};
/** The entries that appear more than once (each repeat listed). */
export const duplicates = (all: readonly string[]): string[] => all.filter((a, i) => all.indexOf(a) !== i);

export interface ScarcePool {
  readonly namespace: string;
  /** The NAD, named as its pool. */
  readonly network: string;
  readonly subnet: string;
  /** The ReplicaSet's pods, all on the victim at first. */
  readonly replicas: number;
  /** The node label that lets the ReplicaSet's pods onto a node. */
  readonly nodeLabel: string;
}

export interface Addressed {
  readonly pod: ApiPod;
  readonly address: string;
}

/** The ReplicaSet's pods (`app` = the network's name) that have an address of the pool, each with it. */
export async function addressed(api: KubeApiFixture, plan: ScarcePool): Promise<Addressed[]> {
  return (await listPods(api, plan.namespace, `app=${plan.network}`)).flatMap((pod) =>
    addressesOn(pod, `${plan.namespace}/${plan.network}`).map((address) => ({ pod, address })),
  );
}

export interface HeldPool {
  /** The ReplicaSet's first pods, on the victim. */
  readonly first: Addressed[];
  /** The victim's blocks: what its replacements may get only after its death is certain. */
  readonly deadBlocks: string[];
  /** Addresses of the victim's blocks no pod holds. */
  readonly spare: number;
  /** Every block of the pool once the fillers run. */
  readonly held: IpBlock[];
}

/**
 * The ReplicaSet on the victim, then fillers on `holder` for every address outside the victim's blocks: the pool has
 * nothing left to give but what the victim's pods hold and its blocks' spare addresses.
 */
export async function holdWholePool(
  api: KubeApiFixture,
  plan: ScarcePool,
  nodes: { readonly victim: ClusterNode; readonly holder: ClusterNode },
): Promise<HeldPool> {
  const { victim, holder } = nodes;
  const annotations = { [NETWORKS]: plan.network };
  await labelNode(api, victim.name, plan.nodeLabel, 'yes');
  await createReplicaSet(api, plan.namespace, {
    name: plan.network,
    replicas: plan.replicas,
    app: plan.network,
    annotations,
    nodeSelector: { [plan.nodeLabel]: 'yes' },
  });
  const first = await until(
    `the ReplicaSet ${plan.network} running with addresses`,
    async () => {
      const a = await addressed(api, plan);
      return a.length === plan.replicas ? a : undefined;
    },
    120000,
    500,
  );
  const astray = first.filter(({ pod }) => pod.spec.nodeName !== victim.name);
  if (astray.length) throw new Error(`${astray[0]!.pod.metadata.name} ran on ${astray[0]!.pod.spec.nodeName}`);
  const deadBlocks = (await ipBlocks(api, plan.network))
    .filter((b) => b.spec.node === victim.name)
    .map((b) => b.spec.cidr);
  const spare = deadBlocks.reduce((n, b) => n + usableIn(b, plan.subnet), 0) - plan.replicas;
  const poolSize = usableIn(plan.subnet, plan.subnet);
  const fillers = Array.from({ length: poolSize - plan.replicas - spare }, (_, i) => `fill-${i}`);
  for (const name of fillers) await createPod(api, plan.namespace, name, { nodeName: holder.name, annotations });
  await waitRunning(api, plan.namespace, fillers, 120000);
  return { first, deadBlocks, spare, held: await ipBlocks(api, plan.network) };
}

/**
 * The victim dies: every process of it killed, its Node object deleted, and its pods deleted at once (as the pod GC
 * does after its quarantine). Answers when it died, by the wall clock: its plexusd renewed its Lease at most a third
 * of the Lease's duration before.
 */
export async function killNode(
  api: KubeApiFixture,
  dying: { readonly victim: ClusterNode; readonly namespace: string; readonly pods: readonly ApiPod[] },
): Promise<number> {
  const { victim, namespace, pods } = dying;
  const diedAt = Date.now();
  await victim.crash();
  const r = await api.request('DELETE', `/api/v1/nodes/${victim.name}`);
  if (r.status !== 200) throw new Error(`deleting node ${victim.name}: ${r.status}`);
  for (const pod of pods)
    await api.request('DELETE', `/api/v1/namespaces/${namespace}/pods/${pod.metadata.name}`, { gracePeriodSeconds: 0 });
  return diedAt;
}

export interface Reuse {
  /** Replacements (pods off the victim) with an address, and those of them in the victim's blocks. */
  readonly replacements: Addressed[];
  readonly reused: Addressed[];
}

/**
 * Polls until every replica runs off the victim with an address of its blocks; `seen` sees each poll (a test fails
 * in it on a reuse too early, a bench notes the first). Answers when that was, by the wall clock.
 */
export async function awaitReuse(
  api: KubeApiFixture,
  plan: ScarcePool,
  dead: { readonly victim: ClusterNode; readonly deadBlocks: readonly string[] },
  seen: (now: Reuse) => void,
  timeoutMs = 150000,
): Promise<{ at: number; reused: Addressed[] }> {
  return until(
    `${plan.replicas} replacements with addresses of the dead node's blocks ${dead.deadBlocks.join(' ')}`,
    async () => {
      const replacements = (await addressed(api, plan)).filter(({ pod }) => pod.spec.nodeName !== dead.victim.name);
      const reused = replacements.filter(({ address }) => dead.deadBlocks.some((b) => inCidr(address, b)));
      seen({ replacements, reused });
      return reused.length === plan.replicas ? { at: Date.now(), reused } : undefined;
    },
    timeoutMs,
    500,
  );
}
