/** Assertions on Result values, shared by the unit tests. */
import assert from 'node:assert/strict';
import type { Result } from '../../src/cni/errors';

/** The value of an ok result; fails the test with the error otherwise. */
export function unwrap<T>(result: Result<T>): T {
  if (!result.ok) assert.fail(`expected ok, got error ${result.error.code}: ${result.error.message}`);
  return result.value;
}

/** The error of a failed result; fails the test if it succeeded. */
export function errorOf<T>(result: Result<T>): { code: number; message: string; details: string } {
  if (result.ok) assert.fail(`expected an error, got ${JSON.stringify(result.value)}`);
  return { code: result.error.code, message: result.error.message, details: result.error.details };
}
