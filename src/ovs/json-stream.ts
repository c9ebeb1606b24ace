/**
 * OVSDB's wire format (RFC 7047 section 4): JSON-RPC messages written back to back on a stream, with no length
 * prefix and no delimiter. This splits a byte stream into whole JSON texts by tracking nesting outside strings.
 */
const OPEN = new Set([0x7b, 0x5b]); // { [
const CLOSE = new Set([0x7d, 0x5d]); // } ]
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Bytes of one message are kept up to this size; a peer that sends more without closing is cut off. */
export const MAX_OVSDB_MESSAGE_BYTES = 64 * 1024 * 1024;

export class JsonStreamSplitter {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private depth = 0;
  private inString = false;
  private escaped = false;

  /** Feeds bytes; answers every JSON text they complete, as strings, in order. Throws when a message is too large. */
  push(chunk: Buffer): string[] {
    const out: string[] = [];
    let start = 0;
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i]!;
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === BACKSLASH) this.escaped = true;
        else if (c === QUOTE) this.inString = false;
        continue;
      }
      if (c === QUOTE) this.inString = true;
      else if (OPEN.has(c)) this.depth++;
      else if (CLOSE.has(c)) {
        this.depth--;
        if (this.depth === 0) {
          this.pending.push(chunk.subarray(start, i + 1));
          out.push(Buffer.concat(this.pending).toString('utf8').trim());
          this.pending = [];
          this.pendingBytes = 0;
          start = i + 1;
        }
      }
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      // Whitespace between messages is not kept.
      if (this.depth > 0 || rest.toString('utf8').trim() !== '') {
        this.pending.push(rest);
        this.pendingBytes += rest.length;
        if (this.pendingBytes > MAX_OVSDB_MESSAGE_BYTES)
          throw new Error(`an OVSDB message exceeds ${MAX_OVSDB_MESSAGE_BYTES} bytes`);
      }
    }
    return out;
  }
}
