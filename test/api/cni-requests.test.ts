/**
 * The socket API's checks on a CNI call before any verb runs, against a fake of its engine port: each malformed
 * request is answered as plexus-cni prints it (exit code 1, a CNI error with the code the spec gives that mistake),
 * and the engine is never called.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { CniCode, err } from '../../src/cni/errors';
import { CniError } from '../../src/cni/errors';
import { request } from 'node:http';
import type { ContainerRequest } from '../../src/engine/context';
import { untilTrue } from '../support/until';
import { ApiBed, type ApiAnswer } from './api-bed';

const ADD_ENV = {
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: 'c0ffee',
  CNI_NETNS: '/var/run/netns/api-test',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
};
const CONFIG = { cniVersion: '1.0.0', name: 'podnet', type: 'plexus' };

/** The CNI error plexus-cni would print, with the exit code it would exit with. */
function cniError(answer: ApiAnswer): { exitCode: string | undefined; code: number; msg: string } {
  assert.equal(answer.status, 200, answer.body);
  const { code, msg } = JSON.parse(answer.body) as { code: number; msg: string };
  return { exitCode: answer.exitCode, code, msg };
}

describe('the API refuses a malformed CNI call before the engine sees it', () => {
  let bed: ApiBed;
  beforeEach(async () => (bed = await ApiBed.start()));
  afterEach(() => bed.close());

  it('answers a body that is not JSON with code 6 (decode failure)', async () => {
    const e = cniError(await bed.send('POST', '/v1/cni', '{"env": {'));
    assert.deepEqual([e.exitCode, e.code], ['1', CniCode.DecodeFailure]);
    assert.match(e.msg, /malformed request from plexus-cni/);
    assert.deepEqual(bed.engine.calls, []);
  });

  it('answers JSON without the env and stdin of a forwarded call with code 6', async () => {
    const e = cniError(await bed.send('POST', '/v1/cni', JSON.stringify({ env: { CNI_COMMAND: 'ADD' } })));
    assert.equal(e.code, CniCode.DecodeFailure);
    assert.deepEqual(bed.engine.calls, []);
  });

  it('answers a body over 4 MiB with code 7 naming the limit', async () => {
    const e = cniError(await bed.cni(ADD_ENV, { ...CONFIG, padding: 'x'.repeat(4 * 1024 * 1024) }));
    assert.deepEqual([e.exitCode, e.code], ['1', CniCode.InvalidNetworkConfig]);
    assert.match(e.msg, /CNI request larger than 4194304 bytes/);
    assert.deepEqual(bed.engine.calls, []);
  });

  it('answers bytes that are not UTF-8 with code 4 (invalid environment)', async () => {
    const body = Buffer.concat([Buffer.from('{"env":{"CNI_IFNAME":"eth'), Buffer.from([0xff]), Buffer.from('"}}')]);
    const e = cniError(await bed.send('POST', '/v1/cni', body));
    assert.equal(e.code, CniCode.InvalidEnvironment);
    assert.match(e.msg, /not valid UTF-8/);
    assert.deepEqual(bed.engine.calls, []);
  });

  it('answers an unknown CNI_COMMAND with code 4 naming the verbs it knows', async () => {
    const e = cniError(await bed.cni({ ...ADD_ENV, CNI_COMMAND: 'ATTACH' }, CONFIG));
    assert.deepEqual([e.exitCode, e.code], ['1', CniCode.InvalidEnvironment]);
    assert.match(e.msg, /CNI_COMMAND "ATTACH" is not one of ADD, .*DEL/);
    assert.deepEqual(bed.engine.calls, []);
  });

  it('answers an ADD without CNI_CONTAINERID with code 4 naming the variable', async () => {
    const { CNI_CONTAINERID: _, ...env } = ADD_ENV;
    const e = cniError(await bed.cni(env, CONFIG));
    assert.equal(e.code, CniCode.InvalidEnvironment);
    assert.match(e.msg, /CNI_CONTAINERID is required for ADD/);
    assert.deepEqual(bed.engine.calls, []);
  });

  it('answers 503 while plexusd is starting, so plexus-cni waits and retries', async () => {
    bed.state.ready = false;
    const answer = await bed.cni(ADD_ENV, CONFIG);
    assert.equal(answer.status, 503);
    assert.equal(answer.exitCode, undefined);
    assert.deepEqual(bed.engine.calls, []);
  });
});

describe('the API bounds and guards the calls it passes on', () => {
  it('answers code 11 (try again later) when every call slot and waiting place is taken', async () => {
    const bed = await ApiBed.start(1, 0);
    try {
      let release = (): void => undefined;
      bed.engine.gate = new Promise((resolve) => (release = resolve));
      const first = bed.cni(ADD_ENV, CONFIG);
      while (bed.engine.calls.length === 0) await new Promise((r) => setTimeout(r, 5));
      const e = cniError(await bed.cni({ ...ADD_ENV, CNI_CONTAINERID: 'second' }, CONFIG));
      assert.deepEqual([e.exitCode, e.code], ['1', CniCode.TryAgainLater]);
      assert.match(e.msg, /plexusd is busy \(1 calls running, 0 queued\)/);
      release();
      assert.equal((await first).exitCode, '0');
      assert.equal(bed.engine.calls.length, 1, 'the refused call never reached the engine');
    } finally {
      await bed.close();
    }
  });

  it("aborts the ADD's signal when plexus-cni's connection closes before the answer, saying the runtime left", async () => {
    const bed = await ApiBed.start();
    try {
      let release = (): void => undefined;
      bed.engine.gate = new Promise((resolve) => (release = resolve));
      const answered = bed.cni(ADD_ENV, CONFIG);
      const left = request({ socketPath: bed.socketPath, method: 'POST', path: '/v1/cni' });
      left.on('error', () => undefined);
      left.end(JSON.stringify({ env: { ...ADD_ENV, CNI_CONTAINERID: 'left' }, stdin: JSON.stringify(CONFIG) }));
      await untilTrue('both ADDs reach the engine', () => bed.engine.calls.length === 2, 5000);
      const signalOf = (cid: string) =>
        bed.engine.addSignals[bed.engine.calls.findIndex((c) => (c.request as ContainerRequest).containerId === cid)];
      assert.equal(signalOf('left')?.aborted, false, 'not aborted while the runtime waits');
      left.destroy();
      await untilTrue(
        'the signal of the ADD whose runtime left is aborted',
        () => signalOf('left')?.aborted === true,
        5000,
      );
      assert.match(String(signalOf('left')?.reason), /the runtime closed its connection before the answer/);
      release();
      assert.equal((await answered).exitCode, '0');
      assert.equal(signalOf('c0ffee')?.aborted, false, 'an answered call is never aborted');
    } finally {
      await bed.close();
    }
  });

  it('answers an engine that throws with code 100 naming the failure, and keeps serving', async () => {
    const bed = await ApiBed.start();
    try {
      bed.engine.throws = new Error('a defect in a verb');
      const e = cniError(await bed.cni(ADD_ENV, CONFIG));
      assert.deepEqual([e.exitCode, e.code, e.msg], ['1', CniCode.Internal, 'plexusd failed: a defect in a verb']);
      bed.engine.throws = undefined;
      bed.engine.addAnswer = err(new CniError(CniCode.InvalidNetworkConfig, 'no network podnet'));
      assert.equal(cniError(await bed.cni(ADD_ENV, CONFIG)).code, CniCode.InvalidNetworkConfig);
    } finally {
      await bed.close();
    }
  });
});
