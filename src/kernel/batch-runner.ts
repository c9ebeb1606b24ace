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
      for (const [index, op] of req.ops.entries()) {
        const netns = op.at ?? req.netns;
        try {
          results.push(runOp(socketFor(netns), netns, op, this.received));
        } catch (e) {
          if (isFatal(e)) throw e;
          const failure = toFailure(e, op);
          // A netns that cannot be entered fails the batch even for ops that tolerate the errno of the op itself.
          if (failure.op === 'open netns' || failure.op === 'setns') return { id: req.id, ok: false, index, failure };
          if (op.ignore?.includes(failure.errnoName)) {
            results.push(null);
            continue;
          }
          return { id: req.id, ok: false, index, failure };
        }
      }
      return { id: req.id, ok: true, results };
    } finally {
      for (const sock of sockets.values()) sock.close();
    }
  }
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
    case 'tapAdd': {
      const create = (): void => createTap(op.tap);
      if (netns) inNetns(netns, create);
      else create();
      // Only what the tap asks for: `up: false` would take it down.
      sock.setLink(op.tap.name, { mtu: op.tap.mtu, mac: op.tap.mac, up: op.tap.up || undefined });
      return null;
    }
    case 'sysctlWrite': {
      if (!/^[a-z0-9_.\-/]+$/i.test(op.key) || op.key.includes('..')) throw new Error(`invalid sysctl key ${op.key}`);
      const path = op.key.includes('/') ? op.key : op.key.replace(/\./g, '/');
      const write = (): void => writeFileSync(`/proc/sys/${path}`, op.value);
      if (netns) inNetns(netns, write);
      else write();
      return null;
    }
  }
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
