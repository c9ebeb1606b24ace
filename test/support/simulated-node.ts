/**
 * A simulated Kubernetes node: a network namespace of the test's with a real plexusd running inside it (its own
 * --node-name, state dir and socket), so the links it makes, the macvlan masters it finds and the API connections it
 * opens are the node's, not the host's. The API server listens on the host's 127.0.0.1, which the namespace cannot
 * reach; a relay inside the namespace (relay.ts) listens on its own 127.0.0.1 and forwards to a unix socket that a
 * relay on the host forwards to the API server, so plexusd's kubeconfig names https://127.0.0.1:<port> as on a real node
 * and TLS is checked end to end. stop() ends the daemon and the relay by their PIDs; the namespace is the test's.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DaemonFixture } from './daemon';
import type { TestNetns } from './netns';
import { Relay } from './relay';
import type { DaemonSettings } from './daemon-flags';

export interface SimulatedNodeOptions {
  /** The node's network namespace (from the test's NetnsFixture, which deletes it). */
  readonly netns: TestNetns;
  /** The Node object's name, plexusd's --node-name. */
  readonly nodeName: string;
  /** The host relay's unix socket, which leads to the API server. */
  readonly apiSocket: string;
  /** A kubeconfig (JSON, as KubeApiFixture writes them) with plexusd's identity; its server is replaced by the node's relay. */
  readonly kubeconfig: string;
  readonly defaultNetwork: string;
  /** More plexusd settings. */
  readonly settings?: DaemonSettings;
}

export class SimulatedNode {
  private constructor(
    readonly nodeName: string,
    readonly netns: TestNetns,
    readonly daemon: DaemonFixture,
    private readonly relay: Relay,
  ) {}

  /** Starts the node's relay and plexusd in its namespace; resolves once plexusd is ready (or stops both and throws). */
  static async start(o: SimulatedNodeOptions, readyTimeoutMs = 60000): Promise<SimulatedNode> {
    const relay = await Relay.start({ host: '127.0.0.1', port: 0 }, { path: o.apiSocket }, o.netns.name);
    const daemon = new DaemonFixture(o.defaultNetwork, { nodeName: o.nodeName, ...o.settings });
    try {
      if ('path' in relay.listening) throw new Error('the node relay should listen on TCP');
      const config = JSON.parse(readFileSync(o.kubeconfig, 'utf8')) as { clusters: { cluster: { server: string } }[] };
      for (const c of config.clusters) c.cluster.server = `https://127.0.0.1:${relay.listening.port}`;
      const kubeconfig = join(daemon.dir, 'node.kubeconfig');
      writeFileSync(kubeconfig, JSON.stringify(config), { mode: 0o600 });
      daemon.addSettings({ kubeconfig });
      daemon.launcher = ['ip', 'netns', 'exec', o.netns.name];
      await daemon.start(readyTimeoutMs);
      return new SimulatedNode(o.nodeName, o.netns, daemon, relay);
    } catch (e) {
      await daemon.stop();
      await relay.stop();
      throw e;
    }
  }

  async stop(): Promise<void> {
    await this.daemon.stop();
    await this.relay.stop();
  }
}

/** Runs every teardown step in order, whatever failed before it; then throws the first failure, if any. */
export async function runEveryStep(steps: readonly (() => unknown)[]): Promise<void> {
  const failures: unknown[] = [];
  for (const step of steps)
    await Promise.resolve()
      .then(step)
      .catch((e: unknown) => failures.push(e));
  if (failures.length) throw failures[0];
}
