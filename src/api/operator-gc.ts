/**
 * GC asked for by an operator (plexusctl gc), not by the runtime: removes the attachments whose network
 * namespace is gone (the runtime lost track of them: a crash, a netns deleted without DEL), or, given the
 * sandboxes to keep, everything else, as a CNI GC with that valid list would.
 */
import { allIssues } from '../common/schema-issues';
import { existsSync } from 'node:fs';
import { z } from 'zod';
import { CniCode, CniError, type Result, err, ok } from '../cni/errors';
import type { AttachmentRecord } from '../engine/journal';
import { errorMessage } from '../common/error-message';

export const OperatorGcSchema = z
  .object({
    /** Container IDs, or `containerId@ifname`, to keep; when given, every other attachment goes. */
    keep: z.array(z.string().min(1)).optional(),
    dryRun: z.boolean().default(false),
  })
  .strict();
export type OperatorGcRequest = z.infer<typeof OperatorGcSchema>;

export function parseOperatorGc(body: string): Result<OperatorGcRequest> {
  let json: unknown;
  try {
    json = JSON.parse(body || '{}');
  } catch (e) {
    return err(new CniError(CniCode.DecodeFailure, 'GC request is not JSON', errorMessage(e)));
  }
  const parsed = OperatorGcSchema.safeParse(json);
  if (!parsed.success)
    return err(new CniError(CniCode.InvalidNetworkConfig, 'invalid GC request', allIssues(parsed.error, 'body')));
  return ok(parsed.data);
}

/** Why a record should go, or undefined to keep it. */
export function staleReason(req: OperatorGcRequest): (record: AttachmentRecord) => string | undefined {
  if (req.keep) {
    const keep = new Set(req.keep);
    return (r) =>
      keep.has(r.meta.containerId) || keep.has(`${r.meta.containerId}@${r.meta.ifname}`)
        ? undefined
        : 'not in the keep list';
  }
  return (r) =>
    r.meta.netns && existsSync(r.meta.netns) ? undefined : `network namespace ${r.meta.netns || '(none)'} is gone`;
}
