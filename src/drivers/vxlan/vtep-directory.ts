/**
 * The port through which a node's vxlan driver meets the other nodes of the cluster (cluster mode, docs/drivers.md):
 * where it publishes the VTEPs it serves and reads those its live peers serve. src/k8s implements it on the node
 * Leases (vtep-leases.ts); src/node plugs it in. Without it (no API), cluster-mode networks have no flood entries.
 */
import type { NetworkDefinition } from '../../networks/nad';

/** The VTEPs one other node serves: VNI → its underlay address. */
export interface PeerVteps {
  readonly node: string;
  readonly vteps: ReadonlyMap<number, string>;
}

export interface VtepDirectory {
  /** This node's name, for messages. */
  readonly node: string;
  /** The Node's InternalIP as last read (the underlay address when a network names no interface); undefined when unknown. */
  nodeAddress(): string | undefined;
  /**
   * What this node's record said when the directory started: the VTEPs a previous plexusd published, whose networks may
   * have been deleted while none ran. Undefined until read.
   */
  publishedBefore(): ReadonlyMap<number, string> | undefined;
  /** Makes `vteps` what this node publishes (VNI → address); a write only when it changed. */
  publish(vteps: ReadonlyMap<number, string>): Promise<void>;
  /**
   * What the other nodes whose lease is live now (by this process's clock) publish; undefined until their records have
   * been read (a plexusd just started knows no peer yet, which is not the same as having none).
   */
  livePeers(): readonly PeerVteps[] | undefined;
  /** `listener` runs whenever a peer's record changed (joined, moved, released); expiry is seen by polling livePeers. */
  onChange(listener: () => void): void;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** The cluster's side of cluster mode: the directory, and the networks defined now (to find the vxlan ones). */
export interface VxlanCluster {
  readonly directory: VtepDirectory;
  readonly networks: () => readonly NetworkDefinition[];
}
