/** Reading a driver's undo step data from the journal: validated at this edge, like every input from disk. */
import type { z } from 'zod';
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { firstIssue } from '../../common/schema-issues';

/**
 * The data of a step of kind `what`, recorded at version `v`, when this build reads that version (`newest` and
 * older; the shapes so far differ in version only) and it has the fields `schema` requires.
 */
export function readStepData<T>(schema: z.ZodType, data: unknown, v: number, newest: number, what: string): Result<T> {
  if (v > newest) return err(newerStep(what, v, newest));
  const r = schema.safeParse(data);
  if (!r.success) return err(unreadableStep(what, firstIssue(r.error, 'its data')));
  return ok(r.data as T);
}

const unreadableStep = (what: string, why: string): CniError =>
  new CniError(CniCode.Internal, `a ${what} step cannot be read: ${why}`);

const newerStep = (what: string, v: number, newest: number): CniError =>
  new CniError(
    CniCode.Internal,
    `a ${what} step of version ${v} was recorded by a newer plexusd; this one reads up to version ${newest}`,
    'run the newer plexusd again to undo it, or remove the attachment by hand',
  );
