/**
 * Every manifest of deploy/ applied twice, as an install and then an upgrade or a re-run do it, with kubectl against
 * a real API server with strict field validation (an unknown or duplicate field is an error, not silently dropped),
 * and what the server stored compared field by field with what the file says. Client-side apply (docs/install.md's
 * command) and server-side apply both. Skips when kube-apiserver, etcd or kubectl are absent.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { ROOT } from '../support/daemon';
import { k8sBinary, k8sMissing, k8sOlderThan, KubeApiFixture } from '../support/k8s';
import { expectedPrerequisites } from '../support/prerequisites';

const kubectl = k8sBinary('kubectl');
const skip = expectedPrerequisites(
  k8sMissing(),
  kubectl ? undefined : 'not available: kubectl (in $PLEXUS_K8S_BIN or ../shared/k8s/v1.36/bin)',
);

/**
 * What an install applies, in its order: the CRDs first, then deploy/ itself; the uninstall DaemonSet on its own; the
 * opt-in DRA objects (resource.k8s.io/v1, served from 1.34 on) only where the API server has them.
 */
const draTooOld = k8sBinary('kube-apiserver') ? k8sOlderThan('1.34') : undefined;
const DIRS = ['deploy/crds', 'deploy', 'deploy/uninstall', ...(draTooOld ? [] : ['deploy/dra'])];

const filesOf = (dir: string): string[] =>
  readdirSync(join(ROOT, dir))
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .map((f) => join(ROOT, dir, f));

/**
 * Where `stored` differs from `wanted` (the file's object): every field the file sets must be stored with that value;
 * fields the server adds (defaults, status, metadata it keeps) are ignored. Lists must have the file's length.
 */
function differences(wanted: unknown, stored: unknown, path = ''): string[] {
  if (Array.isArray(wanted)) {
    if (!Array.isArray(stored)) return [`${path}: the file has a list, the server ${JSON.stringify(stored)}`];
    if (stored.length !== wanted.length)
      return [`${path}: the file has ${wanted.length} items, the server ${stored.length}`];
    return wanted.flatMap((w, i) => differences(w, stored[i], `${path}[${i}]`));
  }
  if (wanted !== null && typeof wanted === 'object') {
    if (stored === null || typeof stored !== 'object' || Array.isArray(stored))
      return [`${path}: the file has an object, the server ${JSON.stringify(stored)}`];
    const kept = stored as Record<string, unknown>;
    return Object.entries(wanted).flatMap(([k, w]) =>
      k in kept
        ? differences(w, kept[k], `${path}.${k}`)
        : [`${path}.${k}: in the file (${JSON.stringify(w)}), not stored`],
    );
  }
  return wanted === stored
    ? []
    : [`${path}: the file says ${JSON.stringify(wanted)}, the server stored ${JSON.stringify(stored)}`];
}

/** Paths of null values: deploy/ never means one, but a plain scalar with ", " in a flow mapping makes one. */
const nulls = (v: unknown, path = ''): string[] => {
  if (v === null) return [path];
  if (typeof v !== 'object') return [];
  return Object.entries(v).flatMap(([k, x]) => nulls(x, `${path}.${k}`));
};

it('has no null field in any manifest of deploy/ (a flow mapping cut by an unquoted comma)', () => {
  const found = [...DIRS, 'deploy/dra']
    .flatMap(filesOf)
    .flatMap((file) =>
      parseAllDocuments(readFileSync(file, 'utf8')).flatMap((d) =>
        nulls(d.toJSON()).map((p) => `${file.slice(ROOT.length + 1)}: ${p}`),
      ),
    );
  assert.deepEqual(found, []);
});

describe('deploy/ applied twice with kubectl on a real API server, strict field validation', { skip }, () => {
  let api: KubeApiFixture;
  let cache: string;
  before(async () => {
    api = await KubeApiFixture.start();
    cache = mkdtempSync(join(tmpdir(), 'plexus-kubectl-'));
  });
  after(async () => {
    if (cache) rmSync(cache, { recursive: true, force: true });
    await api?.stop();
  });

  const run = (...args: string[]): { ok: boolean; output: string } => {
    const r = spawnSync(kubectl!, ['--kubeconfig', api.kubeconfig, '--cache-dir', cache, ...args], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    return { ok: r.status === 0, output: `${r.stdout}${r.stderr}` };
  };

  /** Applies each directory as the install does (`kubectl apply -f DIR`), failing with kubectl's words. */
  const applyAll = (mode: string[]): void => {
    for (const dir of DIRS) {
      const r = run('apply', '--validate=strict', ...mode, '-f', join(ROOT, dir));
      assert.ok(r.ok, `kubectl apply ${mode.join(' ')} -f ${dir}:\n${r.output}`);
    }
  };

  /** Each object of each file against what the server holds now. */
  const storedMatchesFiles = (): void => {
    const found: string[] = [];
    for (const file of DIRS.flatMap(filesOf)) {
      const wanted = parseAllDocuments(readFileSync(file, 'utf8')).map(
        (d) => d.toJSON() as { kind: string; metadata: { name: string } },
      );
      const got = run('get', '-o', 'json', '-f', file);
      assert.ok(got.ok, `kubectl get -f ${file}:\n${got.output}`);
      const items = (JSON.parse(got.output) as { items?: unknown[] }).items ?? [JSON.parse(got.output)];
      assert.equal(items.length, wanted.length, `${file}: ${wanted.length} objects in the file, ${items.length} found`);
      wanted.forEach((w, i) =>
        found.push(
          ...differences(w, items[i]).map((d) => `${file.slice(ROOT.length + 1)} ${w.kind}/${w.metadata.name}${d}`),
        ),
      );
    }
    assert.deepEqual(found, []);
  };

  it('client-side apply (the documented install) succeeds twice, and the server stores what the files say', () => {
    applyAll([]);
    applyAll([]);
    storedMatchesFiles();
  });

  it('server-side apply succeeds twice, and the server stores what the files say', () => {
    const ssa = ['--server-side', '--field-manager=plexus-upgrade-test', '--force-conflicts'];
    applyAll(ssa);
    applyAll(ssa);
    storedMatchesFiles();
  });
});
