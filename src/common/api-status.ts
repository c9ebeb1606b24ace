/**
 * What an API answer's HTTP status says about trying again: no answer (0), 429 (too many requests) and 5xx say "not
 * now" and pass; anything else is the server's "no" to this request.
 */
export const passesSoon = (status: number): boolean => status === 0 || status === 429 || status >= 500;
