import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatIp, fromBytes, parseCidr, parseIp, toBytes } from '../../src/common/ip';
import { formatAddress, parseAddress } from '../../src/kernel/ip';

test('an address goes to network byte order and back, IPv4 and IPv6', () => {
  for (const text of [
    '10.1.0.7',
    '0.0.0.0',
    '255.255.255.255',
    'fd00::7',
    '::',
    '2001:db8:0:1::ffff',
    'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
  ]) {
    const ip = parseIp(text)!;
    const bytes = toBytes(ip);
    assert.equal(bytes.length, ip.family === 4 ? 4 : 16, text);
    assert.equal(formatIp(fromBytes(bytes).family, fromBytes(bytes).value), text);
  }
  assert.deepEqual([...toBytes(parseIp('10.1.0.7')!)], [10, 1, 0, 7]);
  assert.throws(() => fromBytes(new Uint8Array(5)), /4 or 16 bytes, not 5/);
});

test('the kernel form of an address: family, bytes, prefix (full length when bare) and canonical text', () => {
  assert.deepEqual(parseAddress('10.1.0.7/24'), {
    family: 2,
    bytes: Buffer.from([10, 1, 0, 7]),
    prefixLen: 24,
    text: '10.1.0.7',
  });
  assert.equal(parseAddress('fd00:0:0::2').prefixLen, 128);
  assert.equal(parseAddress('FD00:0::2/64').text, 'fd00::2');
  assert.equal(formatAddress(Buffer.from([192, 0, 2, 1])), '192.0.2.1');
  assert.throws(() => parseAddress('10.1/24'), /invalid address/, 'no shorthand IPv4');
  assert.throws(() => parseAddress('10.1.0.7/33'), /invalid address/);
  assert.equal(parseCidr('10.1.0.7/33'), undefined);
});
