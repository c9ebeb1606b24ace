/** Whether a value parsed from untrusted JSON is an object (not null, not an array), before its fields are checked. */
export const isJsonObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);
