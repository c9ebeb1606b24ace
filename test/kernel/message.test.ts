// The netlink codec as pure functions: what goes on the wire, and what is read back from it, byte for byte.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as C from '../../src/kernel/constants';
import {
  attrNested,
  attrString,
  attrU32,
  attrU8,
  encodeAttrs,
  encodeMessage,
  formatMac,
  ifinfomsg,
  parseAttrs,
  parseMac,
  readCString,
  splitMessages,
} from '../../src/kernel/message';
import { KernelCallError } from '../../src/kernel/failure';
import { collectReplies } from '../../src/kernel/replies';

test('a request is nlmsghdr (length, type, flags, seq, pid 0), the family header, then attributes padded to 4 bytes', () => {
  const msg = encodeMessage(C.RTM_DELLINK, C.NLM_F_REQUEST | C.NLM_F_ACK, 7, ifinfomsg(C.AF_UNSPEC, 0), [
    attrString(C.IFLA_IFNAME, 'eth0'),
  ]);
  assert.equal(msg.length, 16 + 16 + 4 + 8, 'header, ifinfomsg, attr header, "eth0\\0" padded to 8');
  assert.equal(msg.readUInt32LE(0), msg.length);
  assert.equal(msg.readUInt16LE(4), C.RTM_DELLINK);
  assert.equal(msg.readUInt16LE(6), C.NLM_F_REQUEST | C.NLM_F_ACK);
  assert.equal(msg.readUInt32LE(8), 7);
  assert.equal(msg.readUInt32LE(12), 0);
  assert.equal(msg.readUInt16LE(32), 9, 'attribute length counts its header and the NUL, not the padding');
  assert.equal(msg.readUInt16LE(34), C.IFLA_IFNAME);
  assert.equal(msg.subarray(36, 41).toString('latin1'), 'eth0\0');
});

test('attributes round-trip, nested ones with their flag stripped on the way back', () => {
  const buf = encodeAttrs([attrU32(1, 0xdeadbeef), attrString(2, 'x'), attrNested(3, [attrU8(1, 5)]), attrU8(4, 9)]);
  const attrs = parseAttrs(buf);
  assert.equal(attrs.get(1)?.readUInt32LE(0), 0xdeadbeef);
  assert.equal(readCString(attrs.get(2)), 'x');
  assert.equal(
    parseAttrs(attrs.get(3)!).get(1)?.[0],
    5,
    'the nested attribute is found under its type, without NLA_F_NESTED',
  );
  assert.equal(attrs.get(4)?.[0], 9);
});

test('a truncated datagram yields the whole messages before it and nothing of the torn one', () => {
  const one = encodeMessage(C.NLMSG_DONE, 0, 1, Buffer.alloc(4), []);
  const two = encodeMessage(C.NLMSG_DONE, 0, 2, Buffer.alloc(4), []);
  const messages = splitMessages(Buffer.concat([one, two.subarray(0, 10)]));
  assert.deepEqual(
    messages.map((m) => m.seq),
    [1],
  );
  assert.deepEqual(
    parseAttrs(Buffer.from([8, 0, 1, 0, 1])),
    new Map(),
    'an attribute longer than the buffer is not read',
  );
});

/** An NLMSG_ERROR reply for request `seq`, with NETLINK_CAP_ACK (the request header only) and an optional extack message. */
function errorReply(seq: number, errno: number, extack?: string): Buffer {
  const payload = Buffer.alloc(4 + 16);
  payload.writeInt32LE(-errno, 0);
  const tlvs = extack ? encodeAttrs([attrString(C.NLMSGERR_ATTR_MSG, extack)]) : Buffer.alloc(0);
  const msg = encodeMessage(C.NLMSG_ERROR, extack ? C.NLM_F_ACK_TLVS : 0, seq, Buffer.concat([payload, tlvs]), []);
  return msg;
}

test('collectReplies: an ack ends the request, a stale reply is skipped, an error is thrown with errno and extack', () => {
  const replies: never[] = [];
  assert.equal(
    collectReplies(Buffer.concat([errorReply(41, 0), errorReply(42, 0)]), 42, replies, 'RTM_NEWLINK', 'x'),
    true,
    'the stale ack of 41 is skipped, 42 ends it',
  );
  assert.equal(
    collectReplies(encodeMessage(C.RTM_NEWLINK, 0, 42, ifinfomsg(0, 3), []), 42, replies, 'RTM_GETLINK', 'x'),
    false,
    'a data reply: more to come',
  );
  assert.equal(replies.length, 1);
  assert.throws(
    () => collectReplies(errorReply(43, 17, 'File exists'), 43, [], 'RTM_NEWLINK', 'eth0'),
    (e: unknown) => {
      assert.ok(e instanceof KernelCallError);
      assert.equal(e.failure.errnoName, 'EEXIST');
      assert.equal(e.failure.extack, 'File exists');
      assert.equal(e.failure.target, 'eth0');
      return true;
    },
  );
});

test('MAC addresses: lower-case text from bytes, bytes from either separator, nothing from a malformed one', () => {
  assert.equal(formatMac(Buffer.from([0x02, 0xab, 0, 1, 2, 0xff])), '02:ab:00:01:02:ff');
  assert.deepEqual([...parseMac('02-AB-00-01-02-FF')!], [2, 0xab, 0, 1, 2, 0xff]);
  for (const bad of ['02:ab:00:01:02', '02:ab:00:01:02:gg', '2:ab:00:01:02:ff'])
    assert.equal(parseMac(bad), undefined, bad);
});
