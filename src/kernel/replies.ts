/** Reading the kernel's replies to one rtnetlink request, on whichever thread sent it. */
import * as C from './constants';
import { KernelCallError, failure } from './failure';
import { parseAttrs, type RawMessage, readCString, splitMessages } from './message';

/**
 * Reads one received buffer of replies to request `seq` into `replies`: true when the request is complete (its ack
 * or NLMSG_DONE came), false when more is to come. The kernel's error for the request is thrown as a KernelCallError.
 */
export function collectReplies(
  received: Buffer,
  seq: number,
  replies: RawMessage[],
  op: string,
  target: string,
): boolean {
  for (const m of splitMessages(received)) {
    if (m.seq !== seq) continue; // a stale reply to an earlier request
    if (m.type === C.NLMSG_DONE) return true;
    if (m.type === C.NLMSG_ERROR) {
      const code = -m.payload.readInt32LE(0);
      if (code === 0) return true;
      throw new KernelCallError(failure(op, target, code, extendedAck(m)));
    }
    replies.push({ ...m, payload: Buffer.from(m.payload) }); // the receive buffer is reused
  }
  return false;
}

/** The kernel's own explanation of an error, when it attached one. */
function extendedAck(m: RawMessage): string | undefined {
  if (!(m.flags & C.NLM_F_ACK_TLVS)) return undefined;
  // With NETLINK_CAP_ACK only the original header (16 bytes) follows the error code.
  const tlvs = parseAttrs(m.payload.subarray(4 + 16));
  return readCString(tlvs.get(C.NLMSGERR_ATTR_MSG));
}
