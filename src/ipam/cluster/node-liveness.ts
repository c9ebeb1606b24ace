/**
 * The proof cluster IPAM needs before it takes a node's blocks back, and the check a node makes on itself before it
 * allocates: a port, so the rules here stay free of how liveness is kept (on the API, a Lease per node that each
 * plexusd renews: src/k8s/node-lease.ts, wired in src/node/main.ts).
 */
export interface NodeLiveness {
  /**
   * How long `node` has shown no sign of life, in ms by this process's clock: 0 while its liveness is renewed, else
   * the time since it should have been (its record expired, was released, or is absent since this process first looked).
   * Undefined when it cannot be told now (the API does not answer): nothing is reclaimed on an unknown.
   */
  expiredForMs(node: string): Promise<number | undefined>;
  /**
   * Why this process must not allocate for its own node now, or undefined when it may. `graceMs` is how long the other
   * nodes wait after this node's liveness expired before they take its blocks: a node cut off from the API stops
   * allocating before then.
   */
  refusal(graceMs: number): string | undefined;
}
