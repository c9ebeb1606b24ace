/**
 * The test harness's own rules: which Kubernetes a run uses (test/support/k8s-binaries.ts), and that a run cannot
 * pass by skipping (test/support/prerequisites.ts, scripts/run-tests.js): in CI a missing expected prerequisite fails
 * the run with its reason; elsewhere it is a skip that the closing lines count and explain.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { ROOT } from '../support/daemon';
import { containerdBinDir, requestedRuntime } from '../support/containerd';
import { k8sBinDir, k8sOlderThan, requestedK8sVersion, resolveDirectory } from '../support/k8s-binaries';
import { requireAll } from '../support/prerequisites';
import { olderPass } from '../support/stack';

const root = mkdtempSync(join(tmpdir(), 'plexus-harness-'));
after(() => rmSync(root, { recursive: true, force: true }));

describe('where the Kubernetes binaries come from', () => {
  it('a directory, a symlink to one, or a file holding a relative path to one (a flattened symlink) all resolve', () => {
    const real = join(root, 'bin');
    mkdirSync(real);
    mkdirSync(join(root, 'v1.35'));
    writeFileSync(join(root, 'v1.35', 'bin'), '../bin');
    symlinkSync(real, join(root, 'linked'));
    writeFileSync(join(root, 'chain'), 'v1.35/bin\n');
    assert.equal(resolveDirectory(real), real);
    assert.equal(resolveDirectory(join(root, 'linked')), join(root, 'linked'));
    assert.equal(resolveDirectory(join(root, 'v1.35', 'bin')), real);
    assert.equal(resolveDirectory(join(root, 'chain')), real);
  });

  it('what is no directory does not resolve: missing, a dangling path, a loop, a large file', () => {
    writeFileSync(join(root, 'dangling'), 'nowhere');
    writeFileSync(join(root, 'loop-a'), 'loop-b');
    writeFileSync(join(root, 'loop-b'), 'loop-a');
    writeFileSync(join(root, 'big'), 'x'.repeat(10_000));
    for (const p of ['absent', 'dangling', 'loop-a', 'big'])
      assert.equal(resolveDirectory(join(root, p)), undefined, p);
  });

  it('PLEXUS_K8S_BIN wins; else PLEXUS_K8S_VERSION, else PLEXUS_STACK picks ../shared/k8s/v<version>/bin, 1.36 by default', () => {
    const shared = resolve(ROOT, '../shared/k8s');
    assert.equal(requestedK8sVersion({}), '1.36');
    assert.equal(requestedK8sVersion({ PLEXUS_STACK: '1.35' }), '1.35');
    assert.equal(requestedK8sVersion({ PLEXUS_STACK: '1.35', PLEXUS_K8S_VERSION: 'v1.36' }), '1.36');
    const explicit = k8sBinDir({ PLEXUS_K8S_BIN: root, PLEXUS_K8S_VERSION: '1.35' });
    assert.deepEqual(explicit, { dir: root, source: `$PLEXUS_K8S_BIN=${root}` });
    assert.match(
      k8sBinDir({ PLEXUS_K8S_BIN: join(root, 'absent') }).problem ?? '',
      /PLEXUS_K8S_BIN=.*absent is not a directory/,
    );
    assert.equal(k8sBinDir({}).source, '../shared/k8s/v1.36/bin (PLEXUS_STACK=1.36)');
    assert.equal(k8sBinDir({ PLEXUS_STACK: '1.35' }).source, '../shared/k8s/v1.35/bin (PLEXUS_STACK=1.35)');
    assert.equal(k8sBinDir({ PLEXUS_K8S_VERSION: '1.35' }).source, '../shared/k8s/v1.35/bin (PLEXUS_K8S_VERSION=1.35)');
    assert.match(
      k8sBinDir({ PLEXUS_K8S_VERSION: '1.9' }).problem ?? '',
      new RegExp(`${shared}/v1\\.9/bin is missing \\(versions tested: 1\\.36, 1\\.35\\)`),
    );
    assert.match(
      k8sBinDir({ PLEXUS_STACK: '1.30' }).problem ?? '',
      /PLEXUS_STACK=1\.30 names no tested pair; use one of 1\.36 \(/,
    );
    assert.match(k8sBinDir({ PLEXUS_K8S_VERSION: 'latest' }).problem ?? '', /is not a minor version/);
  });

  it('a test needing a newer Kubernetes says which, and what this run has', () => {
    const v135 = { major: 1, minor: 35, patch: 6, text: 'v1.35.6' };
    assert.equal(
      k8sOlderThan('1.36', v135),
      'needs Kubernetes >= 1.36 (this run: v1.35.6; the default PLEXUS_STACK=1.36 has it)',
    );
    assert.equal(k8sOlderThan('1.34', v135), undefined);
    assert.equal(k8sOlderThan('1.35', v135), undefined);
    assert.equal(k8sOlderThan('1.34', undefined), undefined);
  });
});

describe('which containerd a run uses', () => {
  const shared = resolve(ROOT, '../shared/containerd');

  it("the default pair runs containerd 2 of ../shared/containerd, PLEXUS_STACK=1.35 the system's", () => {
    assert.deepEqual(requestedRuntime({}), { dir: shared, source: 'PLEXUS_STACK=1.36' });
    assert.deepEqual(requestedRuntime({ PLEXUS_STACK: '1.35' }), { dir: undefined, source: 'PLEXUS_STACK=1.35' });
    assert.equal(olderPass({}), false);
    assert.equal(olderPass({ PLEXUS_STACK: '1.35' }), true);
  });

  it('PLEXUS_CONTAINERD overrides the pair: 2, system, or a directory', () => {
    const older = { PLEXUS_STACK: '1.35' };
    assert.deepEqual(requestedRuntime({ ...older, PLEXUS_CONTAINERD: '2' }), {
      dir: shared,
      source: 'PLEXUS_CONTAINERD=2',
    });
    assert.deepEqual(requestedRuntime({ PLEXUS_CONTAINERD: 'system' }), {
      dir: undefined,
      source: 'PLEXUS_CONTAINERD=system',
    });
    assert.deepEqual(requestedRuntime({ PLEXUS_CONTAINERD: root }), { dir: root, source: `PLEXUS_CONTAINERD=${root}` });
  });

  it('a directory without the binaries (a clone without ../shared) is a reason that names the older pair', () => {
    const empty = join(root, 'no-containerd');
    mkdirSync(empty);
    const got = containerdBinDir({ PLEXUS_CONTAINERD: empty });
    assert.equal(got.dir, undefined);
    assert.equal(
      got.problem,
      `PLEXUS_CONTAINERD=${empty}: ${empty} holds no containerd, ctr, containerd-shim-runc-v2 (plain or .xz); ` +
        "PLEXUS_STACK=1.35 runs the system's containerd",
    );
    assert.match(
      containerdBinDir({ PLEXUS_STACK: 'latest' }).problem ?? '',
      /PLEXUS_STACK=latest names no tested pair/,
    );
  });
});

describe('a run cannot pass by skipping', () => {
  it('CI or PLEXUS_REQUIRE_ALL makes a run require every expected prerequisite', () => {
    assert.equal(requireAll({}), false);
    assert.equal(requireAll({ CI: 'true' }), true);
    assert.equal(requireAll({ CI: '1' }), true);
    assert.equal(requireAll({ CI: 'false' }), false);
    assert.equal(requireAll({ CI: '' }), false);
    assert.equal(requireAll({ PLEXUS_REQUIRE_ALL: '1' }), true);
    assert.equal(requireAll({ PLEXUS_REQUIRE_ALL: '0' }), false);
  });

  // A real run of scripts/run-tests.js on one suite whose kube-apiserver is made unavailable (nothing is started);
  // NODE_TEST_CONTEXT would make the inner runner think it runs inside this test file.
  const run = (env: Record<string, string>): { status: number | null; out: string } => {
    const clean = Object.fromEntries(
      Object.entries(process.env).filter(
        ([k]) => !['CI', 'PLEXUS_REQUIRE_ALL', 'PLEXUS_K8S_VERSION', 'PLEXUS_STACK', 'NODE_TEST_CONTEXT'].includes(k),
      ),
    );
    const r = spawnSync(process.execPath, [join(ROOT, 'scripts/run-tests.js'), 'k8s/apiserver.test'], {
      encoding: 'utf8',
      env: { ...clean, PLEXUS_K8S_BIN: join(root, 'nonexistent'), ...env },
      timeout: 120_000,
    });
    return { status: r.status, out: r.stdout + r.stderr };
  };

  it('in CI, a suite whose Kubernetes binary is missing fails the run and says why', () => {
    const { status, out } = run({ CI: 'true' });
    assert.equal(status, 1, out);
    assert.match(out, /not ok \d+ - the prerequisites this file expects are present/);
    assert.match(
      out,
      /missing prerequisite: not available: kube-apiserver \(\$PLEXUS_K8S_BIN=.*nonexistent is not a directory/,
    );
    assert.match(out, /# plexus: FAILED: 1 skip for a missing prerequisite in a run that requires everything/);
  });

  it('elsewhere, it is a skip, and the closing lines count it and give the reason', () => {
    const { status, out } = run({});
    assert.equal(status, 0, out);
    assert.match(out, /^# skipped 0$/m, "node's own summary is intact (it counts tests, not skipped suites)");
    assert.match(
      out,
      /# plexus: skipped 1 suite \(none of its tests ran\):\n# {3}missing prerequisite: not available: kube-apiserver .*: test\/k8s\/apiserver\.test\.ts/,
    );
    assert.match(out, /# plexus: CI \(or PLEXUS_REQUIRE_ALL=1\) fails a run with these skips/);
  });
});
