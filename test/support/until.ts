/** Polling for a condition in tests: the value a probe answers once it answers one, or an error naming what never came. */
export async function until<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 30000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
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
