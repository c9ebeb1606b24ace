import assert from 'node:assert/strict';
import { test } from 'node:test';
import { interfaceNameProblem } from '../../src/cni/ifname';
import { validateIfname } from '../../src/cni/request';

test('accepts names the kernel takes, up to 15 bytes, multi-byte characters counted in bytes', () => {
  for (const name of ['eth0', 'net1', 'a', 'x'.repeat(15), 'ä-net', 'n\u00e9t.0_1-2'])
    assert.equal(interfaceNameProblem(name), undefined, name);
  assert.equal(interfaceNameProblem('ä'.repeat(8)), 'is longer than 15 bytes', '8 characters, 16 bytes');
});

test('refuses each kind of bad name with its reason', () => {
  const cases: [string, string][] = [
    ['', 'is empty'],
    ['\ud800', 'is not valid Unicode'],
    ['net\udc00', 'is not valid Unicode'],
    ['.', 'may not be "." or ".."'],
    ['..', 'may not be "." or ".."'],
    ['et h0', 'may not contain whitespace'],
    ['a/b', 'may not contain "/"'],
    ['a:b', 'may not contain ":"'],
    ['a\u0001b', 'may not contain control characters'],
    ['x'.repeat(16), 'is longer than 15 bytes'],
  ];
  for (const [name, why] of cases) assert.equal(interfaceNameProblem(name), why, JSON.stringify(name));
});

test('a well-formed surrogate pair (an emoji) is valid Unicode, and counts 4 bytes', () => {
  assert.equal(interfaceNameProblem('n\u{1F600}'), undefined);
  assert.equal(interfaceNameProblem('\u{1F600}'.repeat(4)), 'is longer than 15 bytes');
});

test('validateIfname reports the rule as error 4, naming the field and the name', () => {
  const r = validateIfname('\ud800', 'CNI_IFNAME');
  assert.ok(!r.ok);
  assert.equal(r.error.code, 4);
  assert.equal(r.error.message, 'CNI_IFNAME "\\ud800" is not valid Unicode');
});
