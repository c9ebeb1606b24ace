/**
 * Polling for a condition in tests. `until` and `untilTrue` fail naming what never came; `answerWithin` and
 * `holdsWithin` only say whether it came, for a test that follows with an assertion of its own that tells more.
 */

/** The value `probe` answers once it answers one (not undefined), polling every `everyMs`; undefined after `timeoutMs`. */
export async function answerWithin<T>(
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs: number,
  everyMs = 50,
): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined || Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Whether `condition` holds within `timeoutMs`, polled every `everyMs`. */
export async function holdsWithin(
  condition: () => Promise<boolean> | boolean,
  timeoutMs: number,
  everyMs = 50,
): Promise<boolean> {
  return (await answerWithin(async () => ((await condition()) ? true : undefined), timeoutMs, everyMs)) ?? false;
}

/** The value a probe answers once it answers one, or an error naming what never came. */
export async function until<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 30000,
  everyMs = 50,
): Promise<T> {
  const v = await answerWithin(probe, timeoutMs, everyMs);
  if (v === undefined) throw new Error(`timed out waiting for ${what}`);
  return v;
}

/** Resolves once `condition` holds, polling it; an error naming `what` if it does not within `timeoutMs`. */
export async function untilTrue(
  what: string,
  condition: () => Promise<boolean> | boolean,
  timeoutMs = 30000,
  everyMs = 50,
): Promise<void> {
  await until(what, async () => ((await condition()) ? true : undefined), timeoutMs, everyMs);
}

/** Resolves once `check` stops throwing, retrying it; on timeout, the last error it threw (it says what was wrong). */
export async function untilPasses<T>(check: () => Promise<T> | T, timeoutMs = 30000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, everyMs));
    }
  }
}
