/**
 * Deleting a link inside a pod's netns (a macvlan, ipvlan, tap, a moved host device's stand-in) makes the sending
 * thread wait for the kernel's RCU grace periods, about 20 ms, after the RTNL lock is released. On the kernel worker
 * those waits queued one behind another: a burst of 110 three-network pods took twice as long to delete as 16
 * plugin processes that wait side by side. Here the worker only opens an rtnetlink socket in the pod's netns (a socket
 * stays in the netns it was opened in); the request is then sent and its ack read on a libuv pool thread, so the
 * deletions of different pods wait together, without a V8 thread (about 10 MiB) for each.
 */
import { Semaphore } from '../common/semaphore';
import * as C from './constants';
import { failure, KernelCallError } from './failure';
import { attrString, encodeMessage, ifinfomsg, type RawMessage } from './message';
import { collectReplies } from './replies';
import { sys, sysAsync } from './syscalls';
import type { KernelFailure } from './types';

/** The libuv pool's size as bin/plexusd sets it (UV_THREADPOOL_SIZE), or libuv's default of 4. */
export const libuvPoolThreads = (): number => Number(process.env.UV_THREADPOOL_SIZE) || 4;

/** Pool threads also serve file I/O: 4 of them are left free for it. */
const POOL_THREADS_KEPT_FOR_FILES = 4;

/**
 * The deletions of pod links on the libuv pool, at most the pool's threads less those kept for file I/O at once.
 * One per kernel layer: plexusd makes it at start (tests make their own, or the Kernel's default).
 */
export class PodLinkDeletions {
  private readonly slots: Semaphore;
  private seq = Math.floor(Math.random() * 1e6);

  constructor(poolThreads: number = libuvPoolThreads()) {
    this.slots = new Semaphore(Math.max(1, poolThreads - POOL_THREADS_KEPT_FOR_FILES), Number.MAX_SAFE_INTEGER);
  }

  /**
   * Deletes link `name` over `fd`, an rtnetlink socket in the link's netns; returns the kernel's failure, if any.
   * The socket is the caller's to close.
   */
  async delete(fd: number, name: string): Promise<KernelFailure | undefined> {
    const ran = await this.slots.run(() => this.send(fd, name, ++this.seq));
    return ran!.value;
  }

  private async send(fd: number, name: string, seq: number): Promise<KernelFailure | undefined> {
    const header = ifinfomsg(C.AF_UNSPEC, 0);
    const msg = encodeMessage(C.RTM_DELLINK, C.NLM_F_REQUEST | C.NLM_F_ACK, seq, header, [
      attrString(C.IFLA_IFNAME, name),
    ]);
    if ((await sysAsync.send(fd, msg, msg.length, 0)) < 0) return failure('RTM_DELLINK', name, 5);
    const buf = Buffer.alloc(8192);
    const replies: RawMessage[] = [];
    for (;;) {
      const n = await sysAsync.recv(fd, buf, buf.length, 0);
      if (n < 0) return failure('RTM_DELLINK', name, 5);
      try {
        if (collectReplies(buf.subarray(0, n), seq, replies, 'RTM_DELLINK', name)) return undefined;
      } catch (e) {
        if (e instanceof KernelCallError) return e.failure;
        throw e;
      }
    }
  }
}

/** Closes a descriptor the worker handed over. */
export const closeFd = (fd: number): void => void sys.close(fd);
