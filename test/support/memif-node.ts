/**
 * A real node for memif networks: a private OVS-DPDK with one userspace bridge on the host, and a Plexus node
 * (PlexusNodeFixture) whose plexusd, inside the node, talks to the switch's OVSDB, with two NADs: `podnet` (the default network, a kernel bridge) and
 * `memnet` (type memif on the switch's bridge). The daemon is made, not started: each test adds the flags of its
 * device path (the device plugin or DRA) and starts it. `stop()` removes whatever `start()` got to, even after a
 * failure half-way.
 */
import assert from 'node:assert/strict';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DaemonFixture } from './daemon';
import type { DaemonSettings } from './daemon-flags';
import { podnetBridge } from './k8s';
import type { SingleNode } from './cluster/single-node';
import { devarg, OvsDpdkFixture, unquote } from './ovs-dpdk';
import { PlexusNodeFixture, started } from './plexus-node';
import { Testpmd } from './testpmd';
import { until } from './until';

export interface MemifNodeOptions {
  /** The test's unique prefix: the switch's bridge is `${prefix}ovs`, the pod network's `${prefix}b0`. */
  readonly prefix: string;
  /** plexusd's device resources (the `resources` list of its --device-plugin-config file), given the work dir. */
  readonly resources: (work: string) => readonly Record<string, unknown>[];
  /** Annotations of the memnet NAD (a device-plugin resource name, say). */
  readonly memnetAnnotations?: Record<string, string>;
}

export class MemifNodeFixture {
  private readonly plexus = new PlexusNodeFixture();
  /** The file of `resources`, for --device-plugin-config. */
  resourcesFile = '';
  bridge = '';
  private ovsFixture?: OvsDpdkFixture;

  get work(): string {
    return this.plexus.work;
  }
  get binDir(): string {
    return this.plexus.binDir;
  }
  get ovs(): OvsDpdkFixture {
    return started(this.ovsFixture, 'OVS-DPDK');
  }
  get daemon(): DaemonFixture {
    return this.plexus.daemon;
  }
  get node(): SingleNode {
    return this.plexus.node;
  }
  /** plexusd's API settings for the node (PlexusNodeFixture.apiSettings: it runs inside the node). */
  apiSettings(): DaemonSettings {
    return this.plexus.apiSettings();
  }

  async start(options: MemifNodeOptions): Promise<void> {
    this.bridge = `${options.prefix}ovs`;
    this.ovsFixture = await OvsDpdkFixture.start();
    this.ovs.addBridge(this.bridge);
    // The switch's database socket lies in the fixture's directory, outside the node's own /run/openvswitch: plexusd
    // in the node reaches it by that host path, as the memif sockets the switch serves.
    await this.plexus.start({ prefix: options.prefix, daemonSettings: { ovsdbSocket: this.ovs.dbSocket } });
    this.resourcesFile = join(this.work, 'resources.yaml');
    writeFileSync(this.resourcesFile, JSON.stringify({ resources: options.resources(this.work) }));
    const api = this.node.api;
    const o = 100 + Math.floor(Math.random() * 50);
    const t = Math.floor(Math.random() * 250);
    const podnet = podnetBridge(`${options.prefix}b0`, `10.${o}.${t}.0/24`);
    assert.equal((await api.createNad('default', 'podnet', podnet)).status, 201);
    const memnet = JSON.stringify({
      cniVersion: '1.0.0',
      name: 'memnet',
      type: 'memif',
      bridge: this.bridge,
      rxQueues: 2,
    });
    const made = await api.createNad('default', 'memnet', memnet, options.memnetAnnotations);
    assert.equal(made.status, 201, JSON.stringify(made.body));
  }

  /** The switch's Plexus ports (external_ids plexus-owner is the node's name). */
  plexusPorts(): string[] {
    return this.ovs.portsOwnedBy(this.node.nodeName);
  }

  /** Asserts that the switch opened `port` as a memif server on `socket` with `secret`, and listens there. */
  assertServes(port: string, socket: string, secret: string): void {
    const devargs = unquote(this.ovs.vsctl('get', 'Interface', port, 'options:dpdk-devargs'));
    assert.equal(devarg(devargs, 'role'), 'server');
    assert.equal(devarg(devargs, 'socket'), socket, `${port} listens on ${socket}`);
    assert.equal(devarg(devargs, 'secret'), secret, `${port} has the secret the pod was given`);
    assert.equal(
      unquote(this.ovs.vsctl('get', 'Interface', port, 'error').replace(/^\[\]$/, '""')),
      '',
      'the switch opened it',
    );
    assert.ok(statSync(socket).isSocket(), `the switch listens on ${socket}`);
  }

  /** A memif client (testpmd) on `socket` with `secret`: resolves once the switch sees `port`'s link up. */
  async assertLinkComesUp(port: string, socket: string, secret: string): Promise<void> {
    // The switch transmits on PMD threads + 1 = 2 queues: the client receives on both.
    const client = await Testpmd.start({ socket, secret, rxq: 2, txq: 2 }).catch((e: Error) => {
      throw new Error(`${e.message.slice(-1500)}\novs-vswitchd: ${this.switchLog()}`);
    });
    try {
      await until(
        'the switch to see the memif link up',
        () => (unquote(this.ovs.vsctl('get', 'Interface', port, 'link_state')) === 'up' ? true : undefined),
        20000,
      );
    } finally {
      await client.stop();
    }
  }

  /** The end of the switch's log: why a port or a memif connection failed. */
  switchLog(): string {
    try {
      return readFileSync(join(this.ovs.dir, 'vswitchd.log'), 'utf8').split('\n').slice(-25).join('\n');
    } catch {
      return '(no log)';
    }
  }

  /** The node and plexusd as PlexusNodeFixture stops them; the switch after both; then the files. */
  async stop(): Promise<void> {
    await this.plexus.stop(async () => this.ovsFixture?.stop());
  }
}
