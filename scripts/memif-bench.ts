/**
 * memif on OVS-DPDK, measured: the ADD and DEL latency of a pod whose network is a memif port (through the real
 * plexus-cni and plexusd, the switch's port made and opened before ADD answers), and the packets per second one
 * dpdk-testpmd client sends through the switch to another (informational: this machine has 2 cores for three pollers,
 * the switch's PMD thread and the two clients).
 *
 *   node dist/scripts/memif-bench.js [--pods N] [--seconds S] [--json FILE]
 */
import { writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { memifPortName } from '../src/drivers/memif';
import { DaemonFixture, podArgs } from '../test/support/daemon';
import { NetnsFixture, uniquePrefix } from '../test/support/netns';
import { OvsDpdkFixture, ovsDpdkMissing } from '../test/support/ovs-dpdk';
import { Testpmd } from '../test/support/testpmd';
import { summarize } from './lib/stats';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { pods: { type: 'string' }, seconds: { type: 'string' }, json: { type: 'string' } },
  });
  const pods = Number(values.pods ?? 40);
  const seconds = Number(values.seconds ?? 10);
  const missing = ovsDpdkMissing();
  if (missing) throw new Error(`cannot run: ${missing}`);
  const prefix = uniquePrefix('mb');
  const fx = new NetnsFixture(prefix);
  const bridge = `${prefix}ovs`;
  let ovs: OvsDpdkFixture | undefined;
  // The memif network is the pods' only network: an ADD is the memif port and nothing else.
  const daemon = new DaemonFixture('fast');
  try {
    ovs = await OvsDpdkFixture.start();
    ovs.addBridge(bridge);
    daemon.addSettings({ ovsdbSocket: ovs.dbSocket });
    daemon.writeNad(
      'fast.json',
      JSON.stringify({
        apiVersion: 'k8s.cni.cncf.io/v1',
        kind: 'NetworkAttachmentDefinition',
        metadata: { name: 'fast', namespace: 'default' },
        spec: {
          config: JSON.stringify({
            cniVersion: '1.0.0',
            name: 'fast',
            type: 'memif',
            bridge,
            rxQueues: 2,
            socketDir: join(daemon.dir, 'memif'),
          }),
        },
      }),
    );
    await daemon.start();

    const made: { cid: string; name: string; netns: string; socket: string }[] = [];
    const addMs: number[] = [];
    for (let i = 0; i < pods; i++) {
      const ns = fx.create(`p${i}`);
      const cid = `${prefix}c${i}`;
      const t0 = performance.now();
      const out = await daemon.cni({
        command: 'ADD',
        containerId: cid,
        netns: ns.path,
        ifname: 'eth0',
        args: podArgs(`pod${i}`, cid),
      });
      addMs.push(performance.now() - t0);
      if (out.code !== 0) throw new Error(`ADD ${i} failed: ${out.stdout}${out.stderr}`);
      const socket = (out.json as { interfaces: { socketPath?: string }[] }).interfaces[0]?.socketPath;
      if (!socket) throw new Error(`ADD ${i} named no socket: ${out.stdout}`);
      made.push({ cid, name: `pod${i}`, netns: ns.path, socket });
    }

    // Packets per second from the first pod's client to the second's, through one flow each way.
    const [a, b] = made;
    if (!a || !b) throw new Error('need two pods');
    const portA = memifPortName(a.cid, 'eth0', 'eth0');
    const portB = memifPortName(b.cid, 'eth0', 'eth0');
    ovs.ofctl(bridge, 'del-flows');
    ovs.ofctl(bridge, 'add-flow', `in_port=${portA},actions=output:${portB}`);
    ovs.ofctl(bridge, 'add-flow', `in_port=${portB},actions=output:${portA}`);
    const secret = (socket: string): string => readFileSync(join(dirname(socket), 'secret'), 'utf8');
    // The receiver forwards on core 0, the sender on core 1 with the switch's PMD thread (measured: better than both clients on core 0).
    const receiver = await Testpmd.start({ socket: b.socket, secret: secret(b.socket), rxq: 2, txq: 2, mainLcore: 1 });
    let sender: Testpmd | undefined;
    let pps = 0;
    let sentPps = 0;
    try {
      sender = await Testpmd.start({
        socket: a.socket,
        secret: secret(a.socket),
        rxq: 2,
        txq: 2,
        forwardMode: 'txonly',
      });
      await receiver.command('start');
      await sender.command('start');
      await new Promise((r) => setTimeout(r, 2000)); // warm-up
      const r0 = await receiver.stats();
      const s0 = await sender.stats();
      const t0 = performance.now();
      await new Promise((r) => setTimeout(r, seconds * 1000));
      const r1 = await receiver.stats();
      const s1 = await sender.stats();
      const elapsed = (performance.now() - t0) / 1000;
      pps = (r1.rx - r0.rx) / elapsed;
      sentPps = (s1.tx - s0.tx) / elapsed;
      // Traffic stops before a client leaves: DPDK 22.11's memif can crash the switch otherwise.
      await sender.command('stop');
      await receiver.command('stop');
    } finally {
      await sender?.stop();
      await receiver.stop();
    }

    const delMs: number[] = [];
    for (const p of made) {
      const t0 = performance.now();
      const out = await daemon.cni({
        command: 'DEL',
        containerId: p.cid,
        netns: p.netns,
        ifname: 'eth0',
        args: podArgs(p.name, p.cid),
      });
      delMs.push(performance.now() - t0);
      if (out.code !== 0) throw new Error(`DEL of ${p.cid} failed: ${out.stdout}`);
    }
    const left = ovs.ports(bridge);
    const report = {
      pods,
      add: summarize(addMs),
      del: summarize(delMs),
      pps: Math.round(pps),
      sentPps: Math.round(sentPps),
      seconds,
      portsLeft: left.length,
    };
    process.stdout.write(
      `memif ADD (port made and opened by the switch) over ${pods} pods: median ${report.add.median} ms, p90 ${report.add.p90} ms, max ${report.add.max} ms\n`,
    );
    process.stdout.write(`memif DEL: median ${report.del.median} ms, p90 ${report.del.p90} ms\n`);
    process.stdout.write(
      `through the switch, testpmd txonly -> rxonly for ${seconds} s: ${(pps / 1e6).toFixed(3)} Mpps received (${(sentPps / 1e6).toFixed(3)} Mpps sent; 64-byte frames, 2 cores for 3 pollers)\n`,
    );
    process.stdout.write(`ports left on the bridge after DEL: ${left.length}\n`);
    if (values.json) await writeFile(values.json, JSON.stringify(report, null, 2));
    if (left.length) process.exitCode = 1;
  } finally {
    await daemon.stop();
    await ovs?.stop();
    fx.cleanup();
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`memif-bench: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
