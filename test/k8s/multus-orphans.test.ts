/**
 * Sandboxes the real Multus (v4.3.0, thin) made, whose pods are gone without a DEL, on a real API server: plexusd's
 * orphan sweep removes them as Multus would, with the same two proofs as its own attachments (the netns is gone AND
 * the API has no pod of that UID on the node), and keeps one whose pod object is deleted while its sandbox lives.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiPods } from '../support/api-pods';
import { DaemonFixture, podMaker } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { k8sMissing, KubeApiFixture, PLEXUS_USER } from '../support/k8s';
import { multusBinary, multusMissing } from '../support/multus';
import { ip, NetnsFixture, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { until } from '../support/until';
import { referencePluginDir } from '../support/plugin-dir';

const skip = expectedPrerequisites(k8sMissing(), multusMissing());
const prefix = uniquePrefix('mo');
const NODE = `${prefix}-node`;
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 250);

describe('sandboxes Multus made whose pods are gone without a DEL', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  let api: KubeApiFixture;
  let daemon: DaemonFixture;
  const newPod = podMaker(fx, prefix, []);
  const base = new DaemonFixture('unused');
  const binDir = join(base.dir, 'bin');
  const cacheDir = join(base.dir, 'multus-cache');
  const leaseDir = join(base.dir, 'leases');
  const delegate = {
    cniVersion: '1.0.0',
    name: 'mnet',
    plugins: [
      {
        type: 'bridge',
        bridge: `${prefix}b1`,
        ipam: { type: 'host-local', dataDir: leaseDir, ranges: [[{ subnet: `10.${o}.${t}.0/24` }]] },
      },
    ],
  };
  restoreForwardingAfterwards();

  before(async () => {
    fx.trackHostLink(`${prefix}b0`);
    fx.trackHostLink(`${prefix}b1`);
    referencePluginDir(binDir);
    api = await KubeApiFixture.startForPlexus();
    const podnet = JSON.stringify({
      cniVersion: '1.0.0',
      name: 'podnet',
      type: 'bridge',
      bridge: `${prefix}b0`,
      ipam: { type: 'host-local', ranges: [[{ subnet: `10.${o}.${t + 1}.0/24` }]] },
    });
    assert.equal((await api.createNad('default', 'podnet', podnet)).status, 201);
    daemon = new DaemonFixture('podnet', {
      kubeconfig: api.userKubeconfig(PLEXUS_USER),
      nodeName: NODE,
      orphanSweepSeconds: 0.5,
      multusCacheDir: cacheDir,
      cniBinDir: binDir,
    });
    await daemon.start(30000);
  });
  after(async () => {
    await daemon?.stop();
    await api?.stop();
    await base.stop();
    fx.cleanup();
  });

  const leases = (): string[] =>
    existsSync(join(leaseDir, 'mnet')) ? readdirSync(join(leaseDir, 'mnet')).filter((f) => /^\d/.test(f)) : [];
  /** A pod object on the node, and Multus's ADD of its sandbox, exec'd as a runtime would. */
  const multusPod = async (name: string) => {
    const p = await new ApiPods(api, NODE, newPod).create(name, {});
    const conf = {
      cniVersion: '1.0.0',
      name: 'multus-cni-network',
      type: 'multus',
      cniDir: cacheDir,
      binDir,
      delegates: [delegate],
    };
    const r = spawnSync(multusBinary('multus')!, [], {
      input: JSON.stringify(conf),
      encoding: 'utf8',
      env: {
        PATH: process.env.PATH,
        CNI_COMMAND: 'ADD',
        CNI_CONTAINERID: p.pod.cid,
        CNI_NETNS: p.pod.netns,
        CNI_IFNAME: 'eth0',
        CNI_ARGS: p.args,
        CNI_PATH: binDir,
      },
    });
    assert.equal(r.status, 0, `multus ADD: ${r.stdout} ${r.stderr}`);
    return p;
  };
  const deletePod = async (name: string): Promise<void> => {
    const r = await api.request('DELETE', `/api/v1/namespaces/default/pods/${name}?gracePeriodSeconds=0`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
  };

  it('keeps one whose pod object is deleted while its sandbox lives', async () => {
    const p = await multusPod('alive');
    await deletePod('alive');
    await sleep(2000); // four sweeps
    assert.ok(existsSync(join(cacheDir, p.pod.cid)), "Multus's cache of it is still there");
    assert.equal(leases().length, 1);
    ip('netns', 'delete', p.pod.ns);
    // The cache file goes inside the removal, the log line after it: wait for both.
    await until(
      'the sandbox whose netns went too is removed, and the log says so',
      () =>
        !existsSync(join(cacheDir, p.pod.cid)) &&
        /removed a sandbox Multus made whose pod is gone without a DEL/.test(daemon.stderr)
          ? true
          : undefined,
      15_000,
    );
    assert.deepEqual(leases(), [], 'its lease is released as Multus would release it');
  });

  it('keeps one whose netns is gone while the API still has its pod with that UID', async () => {
    const p = await multusPod('kept');
    ip('netns', 'delete', p.pod.ns);
    await sleep(2000);
    assert.ok(existsSync(join(cacheDir, p.pod.cid)));
    assert.equal(leases().length, 1);
    await deletePod('kept');
    await until(
      'removed once its pod is gone too',
      () => (existsSync(join(cacheDir, p.pod.cid)) ? undefined : true),
      15_000,
    );
    assert.deepEqual(leases(), []);
  });
});
