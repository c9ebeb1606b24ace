// A node:test reporter that writes one JSON line per skipped suite or test (file, title, reason), for the closing
// lines of scripts/run-tests.js. Node's own reporter still prints everything else; this one prints nothing.
'use strict';

module.exports = async function* skips(source) {
  for await (const event of source) {
    if (event.type !== 'test:pass' || !event.data.skip) continue;
    const { file, name, skip, details } = event.data;
    yield `${JSON.stringify({ file, name, reason: skip === true ? '' : String(skip), suite: details?.type === 'suite' })}\n`;
  }
};
