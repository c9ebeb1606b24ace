/**
 * An in-memory kernel for unit tests of the engine: links, addresses and routes per network namespace, the errnos
 * the real kernel gives for the cases the engine meets (EEXIST, ENODEV, a netns that is gone), failure injection, and
 * a log of every operation. Only for pure logic: the real-namespace tests stay the proof of the real path.
 */
import { err, ok } from '../../src/common/result';
import { KernelCallError, type KernelPort, type KernelResult } from '../../src/kernel/kernel';
import type { AddrInfo, BatchOp, KernelFailure, LinkInfo, ResultsOf, RouteInfo } from '../../src/kernel/types';

const HOST = '(host)';
const ERRNO: Record<string, number> = { EEXIST: 17, ENODEV: 19, ENOENT: 2, EIO: 5 };

interface Namespace {
  readonly links: Map<string, LinkInfo>;
  readonly addrs: AddrInfo[];
  readonly routes: RouteInfo[];
}

export interface LoggedOp {
  readonly netns: string;
  readonly op: BatchOp;
}

export class FakeKernel implements KernelPort {
  private readonly namespaces = new Map<string, Namespace>([[HOST, { links: new Map(), addrs: [], routes: [] }]]);
  private nextIndex = 100;
  /** veth pairs, both ways: deleting one end deletes the other, as in the kernel. */
  private readonly peers = new Map<string, { readonly ns: string; readonly name: string }>();
  /** Every operation run, in order (failed ones included). */
  readonly log: LoggedOp[] = [];
  private readonly failures: { readonly when: (entry: LoggedOp) => boolean; readonly errno: string }[] = [];

  /** A pod's network namespace, known by its path from now on. */
  createNetns(path: string): void {
    this.namespaces.set(path, { links: new Map(), addrs: [], routes: [] });
  }

  deleteNetns(path: string): void {
    this.namespaces.delete(path);
  }

  links(netns?: string): string[] {
    return [...(this.namespaces.get(netns ?? HOST)?.links.keys() ?? [])].sort();
  }

  /** Makes the first operation that matches fail with `errno` (once). */
  failWhen(when: (entry: LoggedOp) => boolean, errno = 'EIO'): void {
    this.failures.push({ when, errno });
  }

  async getLink(netns: string | undefined, name: string): Promise<KernelResult<LinkInfo | null>> {
    const r = await this.batch(netns, [{ op: 'linkGet', name }]);
    return r.ok ? ok(r.value[0]) : r;
  }

  async deleteLink(netns: string | undefined, name: string): Promise<KernelResult<unknown>> {
    const r = await this.batch(netns, [{ op: 'linkDel', name, ignore: ['ENODEV'] }]);
    return r.ok ? ok(null) : r;
  }

  batch<const Ops extends readonly BatchOp[]>(
    netns: string | undefined,
    ops: Ops,
  ): Promise<KernelResult<ResultsOf<Ops>>> {
    return Promise.resolve(this.runBatch(netns, ops));
  }

  private runBatch<const Ops extends readonly BatchOp[]>(
    netns: string | undefined,
    ops: Ops,
  ): KernelResult<ResultsOf<Ops>> {
    const results: unknown[] = [];
    for (const [index, op] of ops.entries()) {
      const where = op.at ?? netns ?? HOST;
      const entry = { netns: where, op };
      this.log.push(entry);
      const ns = this.namespaces.get(where);
      if (!ns) return err(new KernelCallError(failure('open netns', where, 'ENOENT'), index));
      const injected = this.failures.findIndex((f) => f.when(entry));
      const errno = injected >= 0 ? this.failures.splice(injected, 1)[0]!.errno : this.run(ns, op, results);
      if (errno === undefined) continue;
      if (op.ignore?.includes(errno)) {
        results.push(null);
        continue;
      }
      return err(new KernelCallError(failure(op.op, 'name' in op ? String(op.name) : '', errno), index));
    }
    return ok(results as ResultsOf<Ops>);
  }

  private pathOf(ns: Namespace): string {
    for (const [path, candidate] of this.namespaces) if (candidate === ns) return path;
    throw new Error('unknown namespace');
  }

  private remove(path: string, name: string): void {
    const ns = this.namespaces.get(path);
    const existing = ns?.links.get(name);
    if (!ns || !existing) return;
    ns.links.delete(name);
    ns.addrs.splice(0, ns.addrs.length, ...ns.addrs.filter((a) => a.index !== existing.index));
    this.peers.delete(`${path}\u0000${name}`);
  }

  /** Runs one op; pushes its result and answers undefined, or answers the errno it fails with. */
  private run(ns: Namespace, op: BatchOp, results: unknown[]): string | undefined {
    const link = (name: string, kind: string, mac?: string): LinkInfo => ({
      index: this.nextIndex++,
      name,
      kind,
      mtu: 1500,
      up: false,
      promisc: false,
      group: 0,
      mac: mac ?? `02:00:00:00:00:${(this.nextIndex % 256).toString(16).padStart(2, '0')}`,
    });
    switch (op.op) {
      case 'linkAdd': {
        const target = op.link.netns ? this.namespaces.get(op.link.netns) : ns;
        if (!target) return 'ENOENT';
        if (target.links.has(op.link.name)) return 'EEXIST';
        // As in the kernel, a veth is made whole or not at all: a peer name its netns already has fails the create.
        if (op.link.kind === 'veth') {
          const peerNs = this.namespaces.get(op.link.peer.netns ?? op.link.netns ?? this.pathOf(ns));
          if (peerNs?.links.has(op.link.peer.name)) return 'EEXIST';
        }
        target.links.set(op.link.name, {
          ...link(op.link.name, op.link.kind, op.link.mac),
          ...(op.link.group !== undefined ? { group: op.link.group } : {}),
        });
        if (op.link.kind === 'veth') {
          const peerPath = op.link.peer.netns ?? op.link.netns ?? this.pathOf(ns);
          const peerNs = this.namespaces.get(peerPath);
          if (!peerNs) return 'ENOENT';
          peerNs.links.set(op.link.peer.name, link(op.link.peer.name, 'veth', op.link.peer.mac));
          const self = { ns: op.link.netns ?? this.pathOf(ns), name: op.link.name };
          const peer = { ns: peerPath, name: op.link.peer.name };
          this.peers.set(`${self.ns}\u0000${self.name}`, peer);
          this.peers.set(`${peer.ns}\u0000${peer.name}`, self);
        }
        break;
      }
      case 'linkDel': {
        const existing = ns.links.get(op.name);
        if (!existing) return 'ENODEV';
        const peer = this.peers.get(`${this.pathOf(ns)}\u0000${op.name}`);
        this.remove(this.pathOf(ns), op.name);
        if (peer) this.remove(peer.ns, peer.name);
        break;
      }
      case 'linkSet': {
        const existing = ns.links.get(op.name);
        if (!existing) return 'ENODEV';
        ns.links.set(op.name, {
          ...existing,
          ...(op.up !== undefined ? { up: op.up } : {}),
          ...(op.mac ? { mac: op.mac } : {}),
          ...(op.mtu ? { mtu: op.mtu } : {}),
          ...(op.group !== undefined ? { group: op.group } : {}),
        });
        break;
      }
      case 'linkGet':
        results.push(ns.links.get(op.name) ?? null);
        return undefined;
      case 'linkList':
        results.push([...ns.links.values()]);
        return undefined;
      case 'addrAdd': {
        const existing = ns.links.get(op.name);
        if (!existing) return 'ENODEV';
        if (ns.addrs.some((a) => a.index === existing.index && a.address === op.address)) return 'EEXIST';
        ns.addrs.push({ index: existing.index, family: op.address.includes(':') ? 6 : 4, address: op.address });
        break;
      }
      case 'addrList': {
        const only = op.name === undefined ? undefined : ns.links.get(op.name);
        if (op.name !== undefined && !only) return 'ENODEV';
        results.push(ns.addrs.filter((a) => !only || a.index === only.index));
        return undefined;
      }
      case 'routeAdd':
        if (ns.routes.some((r) => r.dst === op.route.dst && r.gw === op.route.gw)) return 'EEXIST';
        ns.routes.push({
          family: op.route.dst.includes(':') ? 6 : 4,
          dst: op.route.dst,
          ...(op.route.gw ? { gw: op.route.gw } : {}),
          table: 254,
          scope: 0,
          protocol: 4,
        });
        break;
      case 'routeDel': {
        const i = ns.routes.findIndex(
          (r) => r.dst === op.route.dst && (op.route.gw === undefined || r.gw === op.route.gw),
        );
        if (i < 0) return 'ENOENT';
        ns.routes.splice(i, 1);
        break;
      }
      case 'routeList':
        results.push([...ns.routes]);
        return undefined;
      default:
        break; // the rest (sysctls, fdb, taps, groups) only change what these tests do not look at
    }
    results.push(null);
    return undefined;
  }
}

function failure(op: string, target: string, errnoName: string): KernelFailure {
  return { op, target, errno: ERRNO[errnoName] ?? 5, errnoName, message: errnoName.toLowerCase() };
}
