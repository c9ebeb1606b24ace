/**
 * plexusd's Prometheus metrics after real CNI calls through the shim on real namespaces: latency by command and
 * network type, errors by CNI code, attachments by network, the journal; served on the socket's /metrics and on the
 * optional TCP listener with its probes.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { DaemonFixture, httpGet, metricSample, podArgs } from '../support/daemon';
import { NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('pm');
const octet = 200 + Math.floor(Math.random() * 50);
const third = Math.floor(Math.random() * 248);
// Port 0 would be refused by the flag's check of host:port only if it did not parse: it binds a free port.
const daemon = new DaemonFixture('podnet', { metricsAddress: '127.0.0.1:0', logLevel: 'info' });
const fx = new NetnsFixture(prefix);

describe('metrics', () => {
  let metrics = '';
  let tcpPort = 0;
  const pods: { cid: string; netns: string; name: string }[] = [];

  before(async () => {
    fx.trackHostLink(`${prefix}b0`);
    fx.trackHostLink(`${prefix}b1`);
    daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}b0`, subnet: `10.${octet}.${third}.0/24` });
    daemon.writeBridgeNetwork({ name: 'sec', bridge: `${prefix}b1`, subnet: `10.${octet}.${third + 1}.0/24` });
    await daemon.start();
    const listening = /"address":"127\.0\.0\.1:(\d+)".*serving \/metrics/.exec(daemon.stderr);
    tcpPort = Number(listening?.[1]);
    for (let i = 1; i <= 3; i++) {
      const ns = fx.create(`p${i}`);
      const cid = `${prefix}c${i}`;
      fx.trackHostLink(hostVethName(cid, 'eth0', 'eth0'));
      fx.trackHostLink(hostVethName(cid, 'eth0', 'net1'));
      pods.push({ cid, netns: ns.path, name: `pod${i}` });
    }
    const config = (selection?: string): Record<string, unknown> =>
      daemon.runtimeConfig(
        selection
          ? { runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': selection } } }
          : {},
      );
    const call = async (
      command: string,
      p: { cid: string; netns: string; name: string },
      c: Record<string, unknown>,
    ): Promise<number> => {
      const out = await daemon.cni({
        command,
        containerId: p.cid,
        netns: p.netns,
        ifname: 'eth0',
        args: podArgs(p.name, p.cid),
        config: c,
      });
      return (out.json?.code as number | undefined) ?? out.code ?? -1;
    };
    assert.equal(await call('ADD', pods[0]!, config()), 0);
    assert.equal(await call('ADD', pods[1]!, config('sec')), 0);
    assert.equal(await call('ADD', pods[2]!, config()), 0);
    assert.equal(await call('CHECK', pods[0]!, config()), 0);
    assert.equal(await call('DEL', pods[2]!, config()), 0);
    // Two errors: a network that does not exist (7), and an interface name the CNI spec refuses (4).
    const ns4 = fx.create('p4');
    assert.equal(await call('ADD', { cid: `${prefix}c4`, netns: ns4.path, name: 'pod4' }, config('nope')), 7);
    await new Promise((r) => setTimeout(r, 200)); // the ADDs' network types are read after their replies
    const scraped = await httpGet({ socketPath: daemon.socket, path: '/metrics' });
    assert.equal(scraped.status, 200);
    assert.match(scraped.type, /text\/plain/);
    metrics = scraped.body;
  });
  after(async () => {
    for (const p of pods)
      await daemon.cni({
        command: 'DEL',
        containerId: p.cid,
        netns: p.netns,
        ifname: 'eth0',
        args: podArgs(p.name, p.cid),
        config: daemon.runtimeConfig(),
      });
    await daemon.stop();
    fx.cleanup();
  });

  it('times ADD, CHECK and DEL by the network types of the sandbox', () => {
    assert.equal(
      metricSample(
        metrics,
        'plexus_cni_request_duration_seconds_count{command="ADD",network_type="bridge",result="ok"}',
      ),
      3,
    );
    assert.equal(
      metricSample(
        metrics,
        'plexus_cni_request_duration_seconds_count{command="CHECK",network_type="bridge",result="ok"}',
      ),
      1,
    );
    assert.equal(
      metricSample(
        metrics,
        'plexus_cni_request_duration_seconds_count{command="DEL",network_type="bridge",result="ok"}',
      ),
      1,
    );
    const sum = metricSample(
      metrics,
      'plexus_cni_request_duration_seconds_sum{command="ADD",network_type="bridge",result="ok"}',
    )!;
    assert.ok(sum > 0 && sum < 10, String(sum));
    assert.equal(
      metricSample(
        metrics,
        'plexus_cni_request_duration_seconds_bucket{le="30",command="ADD",network_type="bridge",result="ok"}',
      ),
      3,
    );
  });

  it('counts errors by CNI code', () => {
    assert.equal(metricSample(metrics, 'plexus_cni_errors_total{command="ADD",code="7"}'), 1);
    assert.equal(
      metricSample(
        metrics,
        'plexus_cni_request_duration_seconds_count{command="ADD",network_type="unknown",result="error"}',
      ),
      1,
    );
  });

  it('counts the attached interfaces by network, and the journal', () => {
    assert.equal(metricSample(metrics, 'plexus_attachments{network="default/podnet"}'), 2);
    assert.equal(metricSample(metrics, 'plexus_attachments{network="default/sec"}'), 1);
    assert.equal(metricSample(metrics, 'plexus_journal_records'), 2);
    assert.ok(metricSample(metrics, 'plexus_journal_bytes')! > 0);
    assert.equal(metricSample(metrics, 'plexus_api_write_retries_total'), 0);
    assert.equal(metricSample(metrics, 'plexus_cni_calls_in_flight'), 0);
  });

  it('logs each CNI call as a JSON line naming its container, interface, pod and interfaces', () => {
    const lines = daemon.stderr
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const add = lines.find((l) => l.msg === 'ADD' && l.containerId === `${prefix}c2`);
    assert.deepEqual(
      { pod: add?.pod, ifname: add?.ifname, interfaces: add?.interfaces },
      { pod: 'default/pod2', ifname: 'eth0', interfaces: ['eth0', 'net1'] },
    );
    const failed = lines.find((l) => l.msg === 'CNI call failed' && l.containerId === `${prefix}c4`);
    assert.equal(failed?.pod, 'default/pod4');
    assert.equal(failed?.code, 7);
  });

  it('has the process metrics, with the resident memory', () => {
    assert.ok(metricSample(metrics, 'process_resident_memory_bytes')! > 10 * 1024 * 1024);
  });

  it('serves /metrics, /healthz and /readyz over TCP with --metrics-address', async () => {
    assert.ok(tcpPort > 0, daemon.stderr.slice(-2000));
    const m = await httpGet({ host: '127.0.0.1', port: tcpPort, path: '/metrics' });
    assert.equal(m.status, 200);
    assert.match(m.body, /^plexus_attachments\{network="default\/podnet"\} 2$/m);
    const live = await httpGet({ host: '127.0.0.1', port: tcpPort, path: '/healthz' });
    assert.equal(live.status, 200, live.body);
    assert.deepEqual(JSON.parse(live.body), { ok: true, checks: { kernel: 'ok', journal: 'ok' } });
    const ready = await httpGet({ host: '127.0.0.1', port: tcpPort, path: '/readyz' });
    assert.equal(ready.status, 200);
    assert.deepEqual(JSON.parse(ready.body), { ok: true, checks: { kernel: 'ok', journal: 'ok', started: 'ok' } });
    assert.equal(
      (await httpGet({ host: '127.0.0.1', port: tcpPort, path: '/v1/attachments' })).status,
      404,
      'the CNI and plexusctl API stays on the socket',
    );
  });
});
