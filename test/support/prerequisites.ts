/**
 * Skip or fail: what a suite does when something it needs is not on this machine. A green run must not mean that
 * nothing ran, so a missing *expected* prerequisite (what scripts/setup.sh installs, ../shared beside the checkout,
 * root, hugepages the switch can take) fails the suite, with its reason, where the run must have it: in CI (`CI` set)
 * or with PLEXUS_REQUIRE_ALL=1. Elsewhere (a developer's machine) it is a skip with the reason. What is genuinely
 * optional (a kernel without ipvlan, an opt-in soak) is a skip everywhere.
 *
 * Skip reasons start with MISSING or OPTIONAL; scripts/run-tests.js counts them by that prefix in its closing lines
 * and, when the run requires everything, fails a run with any skip that is not OPTIONAL.
 */
import { type TestContext, test } from 'node:test';

export const MISSING = 'missing prerequisite: ';
export const OPTIONAL = 'optional: ';
/** The title of the test that fails a file in CI, in place of its skipped suite. */
export const REQUIRED_TITLE = 'the prerequisites this file expects are present';

/** Whether this run must have every expected prerequisite (CI, or PLEXUS_REQUIRE_ALL=1). */
export function requireAll(env: NodeJS.ProcessEnv = process.env): boolean {
  const on = (v: string | undefined): boolean =>
    v !== undefined && !['', '0', 'false', 'no'].includes(v.trim().toLowerCase());
  return on(env.CI) || on(env.PLEXUS_REQUIRE_ALL);
}

const missingInCi = (reason: string): Error =>
  new Error(
    `${MISSING}${reason}. This run requires it (CI or PLEXUS_REQUIRE_ALL=1 is set): install it ` +
      '(bash scripts/setup.sh; ../shared beside the checkout; run as root), or run without CI to skip instead',
  );

/**
 * The `skip` option of a suite or test that needs these prerequisites (each a reason it cannot run, or undefined):
 * false when all are present. When one is missing, the suite is skipped with the first reason; where the run
 * requires everything, a test that fails with that reason is registered next to it, so the run cannot pass.
 */
export function expectedPrerequisites(...missing: (string | undefined)[]): string | false {
  const reason = missing.find((m) => m);
  if (!reason) return false;
  if (requireAll()) {
    test(REQUIRED_TITLE, () => {
      throw missingInCi(reason);
    });
  }
  return `${MISSING}${reason}`;
}

/** The `skip` option for something genuinely optional (a kernel feature, an opt-in run): a skip even in CI. */
export function optionalSkip(reason: string | undefined): string | false {
  return reason ? `${OPTIONAL}${reason}` : false;
}

/**
 * Inside a running test, for a prerequisite found missing only there: skips it (answers true: return now), or
 * throws where the run requires everything.
 */
export function skipUnlessPresent(t: TestContext, missing: string | undefined): boolean {
  if (!missing) return false;
  if (requireAll()) throw missingInCi(missing);
  t.skip(`${MISSING}${missing}`);
  return true;
}

/** Inside a running test: skips it for an optional reason (answers true: return now). */
export function skipOptional(t: TestContext, reason: string | undefined): boolean {
  if (!reason) return false;
  t.skip(`${OPTIONAL}${reason}`);
  return true;
}
