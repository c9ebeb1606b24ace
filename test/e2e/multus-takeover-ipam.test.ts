/**
 * The takeover from Multus waits while plexusd cannot read what the pods Multus made hold in a host-local network's
 * store: Multus's config stays (the node keeps running Multus), the log and /readyz say why, and once the store can be
 * read the takeover happens.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, httpGet } from '../support/daemon';
import { uniquePrefix } from '../support/netns';
import { until } from '../support/until';

const prefix = uniquePrefix('mt');
const port = 20000 + Math.floor(Math.random() * 20000);
const daemon = new DaemonFixture('podnet');
const confDir = join(daemon.dir, 'net.d');
const dataDir = join(daemon.dir, 'multus-era-leases');
const store = join(dataDir, 'sec');
const multusConf = join(confDir, '00-multus.conf');

async function readiness(): Promise<{ status: number; takeover: string }> {
  const got = await httpGet({ host: '127.0.0.1', port, path: '/readyz' });
  const checks = (JSON.parse(got.body) as { checks?: Record<string, string> }).checks ?? {};
  return { status: got.status, takeover: checks.multusTakeover ?? 'ok' };
}

before(async () => {
  mkdirSync(confDir, { recursive: true });
  writeFileSync(multusConf, JSON.stringify({ cniVersion: '1.0.0', name: 'multus-cni-network', type: 'multus' }));
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}b0`, subnet: '10.251.0.0/24' });
  daemon.writeBridgeNetwork({
    name: 'sec',
    bridge: `${prefix}b1`,
    subnet: '10.251.1.0/24',
    ipamExtra: { dataDir },
  });
  // A file where host-local's directory of the network should be.
  mkdirSync(dataDir, { recursive: true });
  writeFileSync(store, 'not a directory');
  daemon.addSettings({
    installCniConfig: join(confDir, '00-plexus.conflist'),
    takeOverMultus: true,
    metricsAddress: `127.0.0.1:${port}`,
  });
  await daemon.start();
});
after(async () => {
  await daemon.stop();
});

describe('a takeover from Multus while a host-local store cannot be read', { timeout: 60000 }, () => {
  it("keeps Multus's config, and says why in the log and on /readyz", async () => {
    await until('plexusd to install its conflist', () => existsSync(join(confDir, '00-plexus.conflist')) || undefined);
    // The conflist is installed before the takeover is weighed: wait for the decision's log line.
    await until(
      'the log to say why Multus stays',
      () => /cannot read what the IPAM of the pods Multus made holds/.test(daemon.stderr) || undefined,
    );
    assert.ok(existsSync(multusConf), 'the node keeps running Multus');
    assert.ok(daemon.stderr.includes(`${store} is not a directory`), daemon.stderr.slice(-2000));
    const ready = await readiness();
    assert.equal(ready.status, 503);
    assert.equal(ready.takeover, `${store} is not a directory`);
  });

  it('keeps waiting while a lease file there is not one host-local writes', async () => {
    rmSync(store);
    mkdirSync(store);
    writeFileSync(join(store, '10.251.1.5'), 'c1\r\nnet1\r\nsomething else');
    const malformed = `${join(store, '10.251.1.5')} is not a host-local lease (<containerID>\\r\\n<ifname>)`;
    await until('the retry to see the lease file', async () => (await readiness()).takeover === malformed || undefined);
    assert.ok(existsSync(multusConf), 'the node keeps running Multus');
  });

  it('takes the node over once the store can be read', async () => {
    writeFileSync(join(store, '10.251.1.5'), 'c1\r\nnet1');
    await until('the takeover', () => !existsSync(multusConf) || undefined, 20000);
    assert.ok(existsSync(`${multusConf}.plexus-moved`));
    assert.deepEqual(await readiness(), { status: 200, takeover: 'ok' });
  });
});
