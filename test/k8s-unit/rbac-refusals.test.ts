/** How a permission the API refuses is reported: at once at error level, counted, on readiness, and its end noticed. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pino from 'pino';
import { RbacRefusals } from '../../src/k8s/rbac-refusals';

interface Line {
  level: number;
  msg: string;
  verb?: string;
  resource?: string;
  refusals?: number;
}

const recording = (): { lines: Line[]; log: pino.Logger } => {
  const lines: Line[] = [];
  return { lines, log: pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l) as Line) }) };
};
const patchPods = {
  verb: 'patch',
  resource: 'pods',
  namespace: 'default',
  path: '/api/v1/namespaces/default/pods/web',
  message: 'forbidden',
  blocksServing: false,
};
const listPods = { verb: 'list', resource: 'pods', path: '/api/v1/pods', message: 'forbidden', blocksServing: true };

describe('RbacRefusals', () => {
  it('logs the first refusal of a verb and resource at error level, naming both, and counts every one', () => {
    const { lines, log } = recording();
    const r = new RbacRefusals(log);
    r.refused(patchPods);
    r.refused(patchPods);
    r.refused(patchPods);
    assert.equal(lines.length, 1);
    assert.equal(lines[0]!.level, 50);
    assert.equal(lines[0]!.verb, 'patch');
    assert.equal(lines[0]!.resource, 'pods');
    assert.match(lines[0]!.msg, /refuses plexusd "patch pods" \(HTTP 403 Forbidden\).*deploy\/10-rbac\.yaml/);
    assert.deepEqual(r.totals(), [{ verb: 'patch', resource: 'pods', count: 3 }]);
  });

  it('logs a lasting refusal again once the repeat interval has passed, with the refusals since', () => {
    const { lines, log } = recording();
    let now = 1000;
    const r = new RbacRefusals(log, 60_000, () => now);
    r.refused(patchPods);
    now += 30_000;
    r.refused(patchPods);
    now += 31_000;
    r.refused(patchPods);
    assert.deepEqual(
      lines.map((l) => [l.level, l.refusals]),
      [
        [50, 1],
        [50, 2],
      ],
    );
  });

  it('fails readiness only for what serving depends on, and lists the rest apart', () => {
    const r = new RbacRefusals(pino({ level: 'silent' }));
    r.refused(patchPods);
    r.refused({ ...patchPods, verb: 'create', resource: 'events', path: '/api/v1/namespaces/default/events' });
    r.refused(listPods);
    const problems = r.problems();
    assert.deepEqual(
      problems.map((p) => p.blocksServing),
      [true, false],
    );
    assert.match(problems[0]!.problem, /refuses list pods: plexusd cannot serve/);
    assert.match(problems[1]!.problem, /refuses create events, patch pods;/);
  });

  it('ends a refusal when the same verb and resource is answered otherwise, and says so', () => {
    const { lines, log } = recording();
    const r = new RbacRefusals(log);
    r.refused(listPods);
    r.allowed({ verb: 'list', resource: 'pods' });
    assert.deepEqual(r.problems(), []);
    assert.equal(lines[1]!.level, 30);
    assert.match(lines[1]!.msg, /allows plexusd "list pods" again/);
    assert.deepEqual(r.totals(), [{ verb: 'list', resource: 'pods', count: 1 }], 'the count stays');
  });
});
