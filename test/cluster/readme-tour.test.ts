/**
 * Proof 7 of issue 37: the README's cluster tour, its shell block run as written by bash on the 3-node test cluster
 * (support/cluster/), whose nodes start with their own network only: the image built and imported, deploy/ applied
 * and rolled out on every node, a NAD, a pod with two networks on whichever node the scheduler picks, its
 * network-status, plexusctl in that node's plexusd container, the clean-up.
 *
 * Harness glue, nothing in the tour's text: the tour runs in a directory whose deploy/ is a copy with plexusd given the
 * API relay as its in-cluster API server (support/cluster/daemonset.ts: the cluster has no Service proxy; the host
 * paths stay deploy/'s, each node binds its own directories over them); `ctr` on PATH imports on every node's
 * containerd, as an operator runs the import on each node; `kubectl` is the harness's, as the cluster's admin.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { clusterMissing, TestCluster } from '../support/cluster/cluster';
import { clusterManifests } from '../support/cluster/daemonset';
import { ROOT } from '../support/daemon';
import { kubectlBinary } from '../support/k8s';
import { expectedPrerequisites } from '../support/prerequisites';

const missing = (): string | undefined =>
  clusterMissing() ?? (kubectlBinary() ? undefined : 'kubectl (in $PLEXUS_K8S_BIN or ../shared/k8s)');

/** The first ```sh block of the README's "A cluster tour" section. */
function tourScript(): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## A cluster tour'));
  const block = /```sh\n([\s\S]*?)\n```/.exec(section.slice(0, section.indexOf('\n## ', 3)))?.[1];
  assert.ok(block, 'the README has a cluster tour');
  return block;
}

describe(
  "the README's cluster tour, as written, on the 3-node cluster",
  { skip: expectedPrerequisites(missing()) },
  () => {
    let cluster: TestCluster | undefined;
    const work = mkdtempSync(join(tmpdir(), 'plexus-tour-'));
    const tourDir = join(work, 'tour');
    const toolDir = join(work, 'tools');

    before(async () => {
      cluster = await TestCluster.start({ plexusAtStart: false });
      mkdirSync(tourDir);
      cpSync(join(ROOT, 'deploy'), join(tourDir, 'deploy'), { recursive: true });
      clusterManifests(join(tourDir, 'deploy'), cluster.apiRelay);
      for (const d of ['scripts', 'dist', 'bin', 'package.json', 'node_modules'])
        symlinkSync(join(ROOT, d), join(tourDir, d));
      mkdirSync(toolDir);
      const imports = cluster.nodes.map(
        (n) => `${join(n.spec.containerdDir, 'ctr')} --address ${n.paths.containerdSocket} "$@" || exit $?`,
      );
      writeFileSync(join(toolDir, 'ctr'), `#!/bin/sh\n# ctr on every node of the cluster\n${imports.join('\n')}\n`, {
        mode: 0o755,
      });
      symlinkSync(kubectlBinary()!, join(toolDir, 'kubectl'));
    });

    after(async () => {
      try {
        assert.deepEqual((await cluster?.stop()) ?? [], []);
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    });

    it('runs every step, to a pod whose network-status lists both networks and a plexusctl show of it', () => {
      const c = cluster!;
      const started = Date.now();
      const run = spawnSync('bash', ['-euo', 'pipefail', '-c', tourScript()], {
        cwd: tourDir,
        encoding: 'utf8',
        timeout: 600_000,
        maxBuffer: 32 << 20,
        env: {
          ...process.env,
          PATH: `${toolDir}:${process.env.PATH ?? ''}`,
          KUBECONFIG: c.api.kubeconfig,
          PLEXUS_IMAGE_SKIP_BUILD: '1',
        },
      });
      const output = `${run.stdout}\n${run.stderr}`;
      process.stdout.write(
        `# README tour on ${c.nodes.length} nodes: ${((Date.now() - started) / 1000).toFixed(1)} s\n`,
      );
      assert.equal(run.status, 0, `exit ${run.status}: ${output.slice(-6000)}`);
      assert.match(
        output,
        /"name": "default\/blue",\s*"interface": "net1",\s*"ips": \[\s*"10\.77\.0\.\d+"/,
        'network-status names blue as net1, with its address',
      );
      assert.match(output, /"name": "podnet",\s*"interface": "eth0"/, 'and the cluster network as eth0');
      assert.match(
        output,
        /^\S+ eth0 {2}pod default\/demo {2}netns \S+ {2}attached$/m,
        'plexusctl show of the demo pod',
      );
      assert.match(
        output,
        /^ {2}ip 10\.77\.0\.\d+\/24 gw 10\.77\.0\.1 on interface \d+$/m,
        'plexusctl show lists the address on blue',
      );
    });
  },
);
