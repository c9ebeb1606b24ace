/**
 * Runs batches of kernel operations on the calling thread, synchronously, in one netns per batch (an op may name
 * another with `at`). A runner belongs to one thread: it remembers that thread's netns to return to, holds an
 * rtnetlink socket in it, and one receive buffer for every socket it opens. The kernel worker thread (worker.ts) runs
 * one; plexusd's main thread runs another for short batches while the worker is idle (kernel.ts).
 */
import { writeFileSync } from 'node:fs';
import { deleteLinks } from './delete-many';
import { inNetns, openNetns, rememberHomeNetns } from './netns';
import { KernelCallError } from './failure';
import { receiveBuffer, RtnlSocket } from './rtnetlink';
import { sys } from './syscalls';
import { createTap } from './tun';
import type { BatchOp, KernelFailure } from './types';

export interface BatchRequest {
  readonly id: number;
  readonly netns?: string;
  readonly ops: readonly BatchOp[];
}
export type BatchReply =
  | { readonly id: number; readonly ok: true; readonly results: unknown[] }
  | { readonly id: number; readonly ok: false; readonly index: number; readonly failure: KernelFailure };

/** A thread that cannot return to its own netns throws this: it must stop, whatever it was doing. */
export const isFatal = (e: unknown): boolean => e instanceof Error && e.message.startsWith('FATAL');

export class BatchRunner {
  // Every socket of this thread answers its requests one at a time, into one buffer.
  private readonly received = receiveBuffer();
  private readonly hostSocket: RtnlSocket;

  /** Remembers the calling thread's netns (the one batches without a netns run in) and opens a socket there. */
  constructor() {
    rememberHomeNetns();
    this.hostSocket = RtnlSocket.open(this.received);
  }

  /** Runs the ops in order; the first failure an op does not tolerate stops the batch. Throws only when fatal. */
  run(req: BatchRequest): BatchReply {
    // One socket per netns the batch touches, opened on first use and closed at the end.
    const sockets = new Map<string, RtnlSocket>();
    const socketFor = (netns: string | undefined): RtnlSocket => {
      if (!netns) return this.hostSocket;
      let sock = sockets.get(netns);
      if (!sock) {
        sock = inNetns(netns, () => RtnlSocket.open(this.received));
        sockets.set(netns, sock);
      }
      return sock;
    };
    const results: unknown[] = [];
    try {
      for (let index = 0; index < req.ops.length;) {
        const op = req.ops[index]!;
        const netns = op.at ?? req.netns;
        // Sysctls of one netns in a row are written from inside it, entered once.
        const sysctls = netns ? sysctlsInARow(req, index, netns) : 0;
        const outcomes =
          sysctls > 1 && netns
            ? attempt(op, () => inNetns(netns, () => writeSysctls(req.ops.slice(index, index + sysctls))))
            : attempt(op, () => [{ value: runOp(socketFor(netns), netns, op, this.received) }]);
        if ('failure' in outcomes) return { id: req.id, ok: false, index, failure: outcomes.failure };
        for (const outcome of outcomes) {
          if ('failure' in outcome) return { id: req.id, ok: false, index, failure: outcome.failure };
          results.push(outcome.value);
          index++;
        }
      }
      return { id: req.id, ok: true, results };
    } finally {
      for (const sock of sockets.values()) sock.close();
    }
  }
}

type Outcome = { readonly value: unknown } | { readonly failure: KernelFailure };

/**
 * Runs what carries out `op` (and maybe the ops after it): its outcomes, or the failure of the whole. An errno the op
 * tolerates is its null answer; a netns that cannot be entered fails the batch even for ops that tolerate the errno.
 */
function attempt(op: BatchOp, run: () => Outcome[]): Outcome[] | { readonly failure: KernelFailure } {
  try {
    return run();
  } catch (e) {
    if (isFatal(e)) throw e;
    const failure = toFailure(e, op);
    if (failure.op === 'open netns' || failure.op === 'setns') return { failure };
    return op.ignore?.includes(failure.errnoName) ? [{ value: null }] : { failure };
  }
}

/** How many sysctl writes in the netns `netns` start at op `from` of the batch. */
function sysctlsInARow(req: BatchRequest, from: number, netns: string): number {
  let n = 0;
  for (let op = req.ops[from]; op?.op === 'sysctlWrite' && (op.at ?? req.netns) === netns; op = req.ops[from + n]) n++;
  return n;
}

/** Writes the sysctls in the netns the thread is in, up to the first failure an op does not tolerate. */
function writeSysctls(ops: readonly BatchOp[]): Outcome[] {
  const outcomes: Outcome[] = [];
  for (const op of ops) {
    const o = attempt(op, () => [{ value: op.op === 'sysctlWrite' ? writeSysctl(op, undefined) : null }]);
    if ('failure' in o) return [...outcomes, o];
    outcomes.push(...o);
  }
  return outcomes;
}

function runOp(sock: RtnlSocket, netns: string | undefined, op: BatchOp, received: Buffer): unknown {
  switch (op.op) {
    case 'linkAdd':
      sock.addLink(op.link, openNetns);
      return null;
    case 'linkDel':
      sock.deleteLink(op.name);
      return null;
    case 'linkDelMany':
      return deleteLinks(sock, op.names, op.group);
    case 'linkDelGroup':
      sock.deleteGroup(op.group);
      return null;
    case 'socketOpen':
      return netns ? inNetns(netns, () => RtnlSocket.open(received)).release() : RtnlSocket.open(received).release();
    case 'linkSet': {
      const fd = op.netns ? openNetns(op.netns) : undefined;
      try {
        sock.setLink(op.name, { ...op, netnsFd: fd });
      } finally {
        if (fd !== undefined) sys.close(fd);
      }
      return null;
    }
    case 'linkGet':
      return sock.getLink(op.name) ?? null;
    case 'linkList':
      return sock.listLinks();
    case 'addrAdd':
      sock.addAddress(op.name, op.address, { noDad: op.noDad, noPrefixRoute: op.noPrefixRoute });
      return null;
    case 'addrDel':
      sock.deleteAddress(op.name, op.address);
      return null;
    case 'addrList':
      return sock.listAddresses(op.name);
    case 'routeAdd':
      sock.addRoute(op.route);
      return null;
    case 'routeDel':
      sock.deleteRoute(op.route);
      return null;
    case 'routeList':
      return sock.listRoutes(op.family);
    case 'fdbAppend':
      sock.appendFdb(op.dev, op.mac, op.dst);
      return null;
    case 'fdbDel':
      sock.deleteFdb(op.dev, op.mac, op.dst);
      return null;
    case 'fdbList':
      return sock.listFdb(op.dev);
    case 'tapAdd': {
      const create = (): void => createTap(op.tap);
      if (netns) inNetns(netns, create);
      else create();
      // Only what the tap asks for: `up: false` would take it down.
      sock.setLink(op.tap.name, { mtu: op.tap.mtu, mac: op.tap.mac, up: op.tap.up || undefined });
      return null;
    }
    case 'sysctlWrite':
      return writeSysctl(op, netns);
  }
}

/** Writes one sysctl, from inside `netns` when it is given (else in the netns the thread is in). */
function writeSysctl(op: Extract<BatchOp, { op: 'sysctlWrite' }>, netns: string | undefined): null {
  if (!/^[a-z0-9_.\-/]+$/i.test(op.key) || op.key.includes('..')) throw new Error(`invalid sysctl key ${op.key}`);
  const path = op.key.includes('/') ? op.key : op.key.replace(/\./g, '/');
  const write = (): void => writeFileSync(`/proc/sys/${path}`, op.value);
  if (netns) inNetns(netns, write);
  else write();
  return null;
}

function toFailure(e: unknown, op: BatchOp): KernelFailure {
  if (e instanceof KernelCallError) return e.failure;
  const code = (e as NodeJS.ErrnoException).code;
  return {
    op: op.op,
    target: '',
    errno: 22,
    errnoName: code ?? 'EINVAL',
    message: e instanceof Error ? e.message : String(e),
  };
}
