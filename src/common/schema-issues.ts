/**
 * How a failed schema parse becomes words, the same everywhere: the field as people write it
 * (`ranges[0][1].subnet`), a colon, and zod's reason.
 */
import type { z } from 'zod';

/** A field path as written in the config: keys joined by dots, indexes in brackets, under an optional root. */
export function fieldPath(path: readonly PropertyKey[], root = ''): string {
  let text = root;
  for (const key of path) text += typeof key === 'number' ? `[${key}]` : text ? `.${String(key)}` : String(key);
  return text;
}

/** "field: reason" for one issue; `whole` names the value itself when the issue is at its top level. */
export const describeIssue = (issue: z.core.$ZodIssue, whole: string, root = ''): string =>
  `${fieldPath(issue.path, root) || whole}: ${issue.message}`;

/** The first issue of a failed parse (the one a person fixes first). */
export const firstIssue = (error: z.ZodError, whole: string, root = ''): string => {
  const issue = error.issues[0];
  return issue ? describeIssue(issue, whole, root) : `${whole}: invalid`;
};

/** Every issue of a failed parse, joined by "; ". */
export const allIssues = (error: z.ZodError, whole: string): string =>
  error.issues.map((i) => describeIssue(i, whole)).join('; ');
