/**
 * The socket API's routing, against a fake of its engine port: each CNI verb reaches its own engine verb with the
 * request parsed from the runtime's environment, its answer comes back in the runtime's cniVersion, and plexusctl's
 * paths reach the reads and the GC they name.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { CniCode, CniError, err, ok } from '../../src/cni/errors';
import { ApiBed } from './api-bed';
import { EMPTY_RESULT } from './fake-engine-verbs';

const env = (command: string): Record<string, string> => ({
  CNI_COMMAND: command,
  CNI_CONTAINERID: 'c0ffee',
  CNI_NETNS: '/var/run/netns/api-test',
  CNI_IFNAME: 'net1',
  CNI_PATH: '/opt/cni/bin',
  CNI_ARGS: 'K8S_POD_NAMESPACE=web;K8S_POD_NAME=web-0',
});
const config = (cniVersion = '1.1.0'): Record<string, unknown> => ({ cniVersion, name: 'podnet', type: 'plexus' });

describe('the API routes each call to its verb', () => {
  let bed: ApiBed;
  before(async () => (bed = await ApiBed.start()));
  after(() => bed.close());
  beforeEach(() => {
    bed.engine.calls.length = 0;
    bed.engine.addAnswer = ok(EMPTY_RESULT);
    bed.engine.otherAnswer = ok(undefined);
  });

  it('runs ADD as the engine add, with the container, netns and interface of the environment', async () => {
    bed.engine.addAnswer = ok({
      interfaces: [{ name: 'net1', mac: '02:00:00:00:00:01', sandbox: '/var/run/netns/api-test' }],
      ips: [{ address: '10.1.2.3/24', interface: 0 }],
      routes: [],
    });
    const answer = await bed.cni(env('ADD'), config('1.0.0'));
    assert.equal(answer.exitCode, '0');
    assert.deepEqual(
      bed.engine.calls.map((c) => c.verb),
      ['add'],
    );
    const request = bed.engine.calls[0]!.request as Record<string, unknown>;
    assert.deepEqual(
      [request.command, request.containerId, request.netns, request.ifname],
      ['ADD', 'c0ffee', '/var/run/netns/api-test', 'net1'],
    );
    const result = JSON.parse(answer.body) as { cniVersion: string; ips: { address: string }[] };
    assert.equal(result.cniVersion, '1.0.0', 'the result is in the version the runtime asked for');
    assert.deepEqual(
      result.ips.map((i) => i.address),
      ['10.1.2.3/24'],
    );
  });

  for (const [command, verb] of [
    ['DEL', 'del'],
    ['CHECK', 'check'],
    ['STATUS', 'status'],
    ['GC', 'gc'],
  ] as const) {
    it(`runs ${command} as the engine ${verb}, answering nothing on stdout when it succeeds`, async () => {
      const answer = await bed.cni(env(command), config());
      assert.deepEqual([answer.exitCode, answer.body], ['0', '']);
      assert.deepEqual(
        bed.engine.calls.map((c) => [c.verb, (c.request as { command: string }).command]),
        [[verb, command]],
      );
    });
  }

  it('answers VERSION itself, without the engine', async () => {
    const answer = await bed.cni({ CNI_COMMAND: 'VERSION' }, { cniVersion: '0.4.0' });
    assert.equal(answer.exitCode, '0');
    const body = JSON.parse(answer.body) as { cniVersion: string; supportedVersions: string[] };
    assert.equal(body.cniVersion, '0.4.0');
    assert.ok(body.supportedVersions.includes('1.1.0'), answer.body);
    assert.deepEqual(bed.engine.calls, []);
  });

  it("answers a verb's CNI error with its code and message, in the runtime's cniVersion", async () => {
    bed.engine.otherAnswer = err(new CniError(CniCode.UnknownContainer, 'no such container', 'c0ffee'));
    const answer = await bed.cni(env('CHECK'), config('0.4.0'));
    assert.equal(answer.exitCode, '1');
    assert.deepEqual(JSON.parse(answer.body), {
      cniVersion: '0.4.0',
      code: CniCode.UnknownContainer,
      msg: 'no such container',
      details: 'c0ffee',
    });
  });

  it("serves plexusctl's reads: /v1/attachments, /v1/networks with each error's code, /healthz", async () => {
    bed.engine.networkErrors = [new CniError(CniCode.InvalidNetworkConfig, 'bad NAD', 'web/broken')];
    try {
      assert.deepEqual(await bed.send('GET', '/v1/attachments'), { status: 200, exitCode: undefined, body: '[]' });
      const networks = await bed.send('GET', '/v1/networks');
      assert.deepEqual(JSON.parse(networks.body), {
        networks: [],
        errors: [{ code: CniCode.InvalidNetworkConfig, msg: 'bad NAD', details: 'web/broken' }],
      });
      assert.equal((await bed.send('GET', '/healthz')).status, 200);
    } finally {
      bed.engine.networkErrors = [];
    }
  });

  it("runs plexusctl's GC as the engine sweep, dry when asked, and refuses a body it cannot read with 400", async () => {
    const dry = await bed.send('POST', '/v1/gc', JSON.stringify({ dryRun: true }));
    assert.equal(dry.status, 200, dry.body);
    assert.equal((JSON.parse(dry.body) as { dryRun: boolean }).dryRun, true);
    assert.deepEqual(bed.engine.calls, [{ verb: 'sweep', request: { dryRun: true } }]);
    const refused = await bed.send('POST', '/v1/gc', JSON.stringify({ keep: 'not a list' }));
    assert.equal(refused.status, 400);
    assert.match(refused.body, /invalid GC request/);
    assert.equal(bed.engine.calls.length, 1, 'a refused GC sweeps nothing');
  });

  it('answers 404 naming a path it has no route for', async () => {
    const answer = await bed.send('POST', '/v1/attachments');
    assert.equal(answer.status, 404);
    assert.match(answer.body, /no route POST \/v1\/attachments/);
    assert.deepEqual(bed.engine.calls, []);
  });
});
