/** The tests' polling helpers (test/support/until.ts): what each answers when the condition comes, and when it never does. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { answerWithin, holdsWithin, until, untilPasses, untilTrue } from '../support/until';

/** A probe that answers `value` from its `n`th call on, undefined before. */
const answersFrom = <T>(n: number, value: T): (() => T | undefined) => {
  let calls = 0;
  return () => (++calls >= n ? value : undefined);
};

describe('test/support/until.ts', () => {
  it('answerWithin gives the first answer, or undefined once the time is up', async () => {
    assert.equal(await answerWithin(answersFrom(3, 'x'), 1000, 1), 'x');
    assert.equal(await answerWithin(answersFrom(Infinity, 'x'), 20, 1), undefined);
  });

  it('holdsWithin says whether the condition came in time', async () => {
    const later = answersFrom(3, true);
    assert.equal(await holdsWithin(() => later() ?? false, 1000, 1), true);
    assert.equal(await holdsWithin(() => false, 20, 1), false);
  });

  it('until and untilTrue fail naming what never came', async () => {
    assert.equal(await until('x', answersFrom(2, 7), 1000, 1), 7);
    await assert.rejects(
      until('the seventh pod', () => undefined, 20, 1),
      /timed out waiting for the seventh pod/,
    );
    await assert.rejects(
      untilTrue('a lease', () => false, 20, 1),
      /timed out waiting for a lease/,
    );
  });

  it("untilPasses retries a throwing check and, on timeout, fails with the check's last error", async () => {
    let calls = 0;
    assert.equal(
      await untilPasses(
        () => {
          if (++calls < 3) throw new Error('not yet');
          return calls;
        },
        1000,
        1,
      ),
      3,
    );
    let n = 0;
    await assert.rejects(
      untilPasses(
        () => {
          throw new Error(`attempt ${++n} failed`);
        },
        20,
        1,
      ),
      (e: Error) => e.message === `attempt ${n} failed` && n > 1,
    );
  });
});
