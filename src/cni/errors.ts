/**
 * CNI errors as values. Every failure that can reach a runtime is one of these:
 * a spec error code, a message a human can act on, and details for machines and logs.
 */
import { errorMessage } from '../common/error-message';
import type { Result as GenericResult } from '../common/result';

/** Error codes from the CNI spec (SPEC.md, "Error" section). */
export const CniCode = {
  IncompatibleVersion: 1,
  UnsupportedField: 2,
  UnknownContainer: 3,
  InvalidEnvironment: 4,
  IoFailure: 5,
  DecodeFailure: 6,
  InvalidNetworkConfig: 7,
  TryAgainLater: 11,
  PluginNotAvailable: 50,
  PluginNotAvailableLimited: 51,
  /** Codes >= 100 are plugin-specific; Plexus uses 100 for internal and kernel failures. */
  Internal: 100,
} as const;
export type CniCode = (typeof CniCode)[keyof typeof CniCode];

export class CniError extends Error {
  readonly code: number;
  readonly details: string;

  constructor(code: number, msg: string, details = '') {
    super(msg);
    this.name = 'CniError';
    this.code = code;
    this.details = details;
  }

  /** The wire shape the CNI spec defines for errors (cniVersion is added by the caller). */
  toJSON(): { code: number; msg: string; details?: string } {
    return this.details
      ? { code: this.code, msg: this.message, details: this.details }
      : { code: this.code, msg: this.message };
  }

  /** A new error with the same code whose message is prefixed with context, e.g. the attachment it concerns. */
  withContext(context: string): CniError {
    return new CniError(this.code, `${context}: ${this.message}`, this.details);
  }
}

/** A Result whose error is, unless said otherwise, a CNI error. */
export type Result<T, E = CniError> = GenericResult<T, E>;
export { ok, err } from '../common/result';

/** Turns anything thrown into a CniError, keeping CNI errors as they are. */
export function toCniError(thrown: unknown, code: number = CniCode.Internal, context?: string): CniError {
  const base = thrown instanceof CniError ? thrown : new CniError(code, errorMessage(thrown), stackTop(thrown));
  return context ? base.withContext(context) : base;
}

/** The first three lines of a stack, on one line: enough to find where an unexpected error came from. */
const stackTop = (thrown: unknown): string =>
  thrown instanceof Error && thrown.stack ? thrown.stack.split('\n').slice(0, 3).join(' | ') : '';
