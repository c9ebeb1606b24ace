/** definedFields: optional fields left out, not present as undefined. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { definedFields } from '../../src/common/defined-fields';

test('definedFields drops undefined properties and keeps every other value, falsy ones included, in order', () => {
  const out = definedFields({ a: 1, b: undefined, c: '', d: 0, e: null, f: false });
  assert.deepEqual(out, { a: 1, c: '', d: 0, e: null, f: false });
  assert.deepEqual(Object.keys(out), ['a', 'c', 'd', 'e', 'f']);
  assert.equal('b' in out, false);
});
