/**
 * Pods with several networks, two ways: Plexus (one call of bin/plexus-cni, the networks selected by the pod's
 * annotation), and a "reference runtime" that execs each network's reference plugin itself, one after another as a
 * runtime (or Multus' delegation) would, and deletes them in reverse order.
 */
import {
  type AddResult,
  type Outcome,
  type Plugin,
  type Pod,
  SELECTION_ANNOTATION,
  addressesOf,
  describeFailure,
  hostSideLinksOf,
  invoke,
  parseAdd,
  withPodAnnotations,
} from './cni';

/** What one pod's ADD through a runtime gave. */
export interface MultiAdd {
  readonly ms: number;
  readonly error?: string;
  /** Per network (plexus: one merged result), the results that were obtained, in order. */
  readonly results: readonly AddResult[];
  /** How many plugin ADDs were started (reference: DEL goes to each of them, in reverse). */
  readonly attempted: number;
}

export interface MultiDel {
  readonly ms: number;
  readonly error?: string;
}

export interface MultiRuntime {
  readonly name: string;
  /** Short tag for namespace and pod names. */
  readonly tag: string;
  /** Host bridges its pods hang off: links still enslaved after DEL are leaks; their own names are not pod links. */
  readonly bridges: readonly string[];
  /** Pod interfaces one ADD creates. */
  readonly interfaces: number;
  add(pod: Pod): Promise<MultiAdd>;
  /** The first DEL, as StopPodSandbox sends it (netns, prevResult). */
  del(pod: Pod, added: MultiAdd): Promise<MultiDel>;
  /** Leases and records its IPAM/state still holds. */
  leftovers(): Promise<string[]>;
  /** Waits for work it does after DEL answered (plexusd's background teardown), before leaks are looked for. */
  settled?(): Promise<unknown>;
}

export const addressesOfAdd = (added: MultiAdd): string[] => added.results.flatMap(addressesOf);
export const hostLinksOfAdd = (added: MultiAdd, bridges: readonly string[]): string[] =>
  added.results.flatMap((r) => hostSideLinksOf(r, bridges));

/** Plexus: one exec of the shim; the secondary networks come from the pod's selection annotation. */
export function plexusRuntime(options: {
  name: string;
  tag: string;
  plugin: Plugin;
  /** The `k8s.v1.cni.cncf.io/networks` annotation; empty for the default network only. */
  selection: string;
  interfaces: number;
  bridges: readonly string[];
  leftovers: () => Promise<string[]>;
  settled?: () => Promise<unknown>;
}): MultiRuntime {
  const plugin = withPodAnnotations(
    options.plugin,
    options.selection !== '' ? { [SELECTION_ANNOTATION]: options.selection } : {},
  );
  return {
    name: options.name,
    tag: options.tag,
    bridges: options.bridges,
    interfaces: options.interfaces,
    leftovers: options.leftovers,
    ...(options.settled ? { settled: options.settled } : {}),
    async add(pod) {
      const outcome = await invoke(plugin, 'ADD', pod);
      const parsed = parseAdd(outcome);
      if (!parsed.ok) return { ms: outcome.ms, error: parsed.why, results: [], attempted: 1 };
      const podIfs = parsed.result.interfaces.filter((i) => i.sandbox).length;
      if (podIfs !== options.interfaces)
        return {
          ms: outcome.ms,
          error: `result has ${podIfs} pod interfaces, expected ${options.interfaces}`,
          results: [parsed.result],
          attempted: 1,
        };
      return { ms: outcome.ms, results: [parsed.result], attempted: 1 };
    },
    async del(pod, added) {
      const first = added.results[0];
      const outcome = await invoke(plugin, 'DEL', pod, first !== undefined ? { prevResult: first } : {});
      return outcome.exitCode === 0 ? { ms: outcome.ms } : { ms: outcome.ms, error: describeFailure(outcome) };
    },
  };
}

export interface ReferenceNetwork {
  readonly ifname: string;
  readonly plugin: Plugin;
}

/**
 * The reference runtime: each network's plugin exec'd directly with the CNI environment a runtime gives it
 * (CNI_IFNAME eth0, net1, ...), one after another; on a failed ADD it stops there (DEL then covers every plugin
 * started, as a runtime's cleanup would). DEL in reverse order, each with its own cached result as prevResult,
 * continuing past failures. Times are wall time over all execs.
 */
export function referenceRuntime(options: {
  name: string;
  tag: string;
  networks: readonly ReferenceNetwork[];
  bridges: readonly string[];
  leftovers: () => Promise<string[]>;
}): MultiRuntime {
  return {
    name: options.name,
    tag: options.tag,
    bridges: options.bridges,
    interfaces: options.networks.length,
    leftovers: options.leftovers,
    async add(pod) {
      const t0 = process.hrtime.bigint();
      const results: AddResult[] = [];
      let attempted = 0;
      for (const network of options.networks) {
        attempted++;
        const parsed = parseAdd(await invoke(network.plugin, 'ADD', pod, { ifname: network.ifname }));
        if (!parsed.ok)
          return {
            ms: elapsed(t0),
            error: `${network.ifname} (${String(network.plugin.config['type'])}): ${parsed.why}`,
            results,
            attempted,
          };
        results.push(parsed.result);
      }
      return { ms: elapsed(t0), results, attempted };
    },
    async del(pod, added) {
      const t0 = process.hrtime.bigint();
      const errors: string[] = [];
      for (let i = added.attempted - 1; i >= 0; i--) {
        const network = options.networks[i];
        if (network === undefined) continue;
        const prev = added.results[i];
        const outcome: Outcome = await invoke(network.plugin, 'DEL', pod, {
          ifname: network.ifname,
          ...(prev !== undefined ? { prevResult: prev } : {}),
        });
        if (outcome.exitCode !== 0)
          errors.push(`${network.ifname} (${String(network.plugin.config['type'])}): ${describeFailure(outcome)}`);
      }
      return { ms: elapsed(t0), ...(errors.length > 0 ? { error: errors.join('; ') } : {}) };
    },
  };
}

const elapsed = (t0: bigint): number => Number(process.hrtime.bigint() - t0) / 1e6;
