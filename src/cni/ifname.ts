/**
 * The one rule for interface names, wherever they come from: CNI_IFNAME, a selection's `interface`, a generated
 * name, a driver's `master`/`bridge`/`device` field. Checked once, at the edge, on the bytes the kernel will see:
 * whatever ADD accepts, DEL must be able to name again.
 */

/** A UTF-16 surrogate without its pair: encodes as U+FFFD, so the kernel would get another name than the one asked for. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** C0 controls and DEL (0x00-0x1f, 0x7f): a code point test rather than a regex of control characters. */
const hasControlCharacter = (name: string): boolean =>
  [...name].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f);

/** Why the kernel would refuse `name` for an interface (or take it as another name), or undefined when it is fine. */
export function interfaceNameProblem(name: string): string | undefined {
  if (name === '') return 'is empty';
  if (LONE_SURROGATE.test(name)) return 'is not valid Unicode';
  if (Buffer.byteLength(name) > 15) return 'is longer than 15 bytes';
  if (name === '.' || name === '..') return 'may not be "." or ".."';
  if (/\s/.test(name)) return 'may not contain whitespace';
  if (name.includes('/')) return 'may not contain "/"';
  if (name.includes(':')) return 'may not contain ":"';
  if (hasControlCharacter(name)) return 'may not contain control characters';
  return undefined;
}
