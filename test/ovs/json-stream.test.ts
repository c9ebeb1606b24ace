import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { JsonStreamSplitter } from '../../src/ovs/json-stream';

describe('OVSDB stream splitting', () => {
  it('splits messages written back to back, with no delimiter', () => {
    const s = new JsonStreamSplitter();
    assert.deepEqual(s.push(Buffer.from('{"id":1,"result":[]}{"id":2,"result":[{}]}')), [
      '{"id":1,"result":[]}',
      '{"id":2,"result":[{}]}',
    ]);
  });

  it('joins a message cut anywhere, even inside a string or between a backslash and what it escapes', () => {
    const text = '{"id":7,"result":[{"rows":[{"name":"a}\\"]{b"}]}]}';
    for (let cut = 1; cut < text.length; cut++) {
      const s = new JsonStreamSplitter();
      const out = [...s.push(Buffer.from(text.slice(0, cut))), ...s.push(Buffer.from(text.slice(cut)))];
      assert.deepEqual(out, [text], `cut at ${cut}`);
      assert.deepEqual(JSON.parse(out[0]!), { id: 7, result: [{ rows: [{ name: 'a}"]{b' }] }] });
    }
  });

  it('keeps multi-byte characters whole when a chunk ends inside one', () => {
    const bytes = Buffer.from('{"name":"brücke"}');
    const s = new JsonStreamSplitter();
    const out = [...s.push(bytes.subarray(0, 12)), ...s.push(bytes.subarray(12))];
    assert.deepEqual(out, ['{"name":"brücke"}']);
  });

  it('ignores whitespace between messages', () => {
    const s = new JsonStreamSplitter();
    assert.deepEqual(s.push(Buffer.from(' \n{"a":1}\n ')), ['{"a":1}']);
    assert.deepEqual(s.push(Buffer.from('[1,2]')), ['[1,2]']);
  });
});
