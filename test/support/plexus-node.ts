/**
 * A real node running Plexus, as the kubelet tests use it: a single-node cluster (cluster/single-node.ts: the node
 * its own network and mount namespaces, its own containerd and kubelet) whose runtime calls plexus-cni, the Plexus
 * CRDs and RBAC installed (the cluster's), and a plexusd made for it that runs inside the node, not started: each test creates its NADs and
 * adds its own settings to `apiSettings()` before it starts the daemon. `stop()` removes whatever `start()` got to,
 * even after a failure half-way: the node's pods first (plexusd serves the runtime's DELs while it stops the pods'
 * sandboxes), then the daemon, then the cluster and the work directory.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiPods } from './api-pods';
import { SingleNode } from './cluster/single-node';
import { DaemonFixture } from './daemon';
import { plexusConflist } from './kube-node';
import type { DaemonSettings } from './daemon-flags';
import { plexusPluginDir } from './plugin-dir';

export interface PlexusNodeOptions {
  /** Names the work directory (plexus-PREFIX-...). */
  readonly prefix: string;
  /** plexusd's settings known before the node is up (more are added with addSettings). */
  readonly daemonSettings?: DaemonSettings;
  /** The cniVersion of the runtime's conflist (plexusConflist: 1.0.0 by default). */
  readonly cniVersion?: string;
  /**
   * Runs once the node's processes are up, before it is waited for Ready, the daemon already placed in the node (a
   * plexusd without the API that the node's readiness waits for, say).
   */
  readonly beforeReady?: (daemon: DaemonFixture) => Promise<void>;
}

export class PlexusNodeFixture {
  work = '';
  /** The runtime's CNI plugin directory: the reference plugins and plexus-cni. */
  binDir = '';
  private daemonFixture?: DaemonFixture;
  private nodeFixture?: SingleNode;

  get daemon(): DaemonFixture {
    return started(this.daemonFixture, 'plexusd');
  }
  get node(): SingleNode {
    return started(this.nodeFixture, 'the node');
  }

  async start(options: PlexusNodeOptions): Promise<void> {
    this.work = mkdtempSync(join(tmpdir(), `plexus-${options.prefix}-`));
    this.binDir = plexusPluginDir(join(this.work, 'bin'));
    const daemon = new DaemonFixture('podnet', options.daemonSettings);
    this.daemonFixture = daemon;
    this.nodeFixture = await SingleNode.start({
      cniBinDir: this.binDir,
      cniConfList: plexusConflist(daemon.socket, options.cniVersion),
      beforeReady: async (launcher) => {
        daemon.launcher = launcher; // the DaemonSet's plexusd runs in the node's namespaces (hostNetwork)
        await options.beforeReady?.(daemon);
      },
    });
  }

  /**
   * plexusd's settings for this node: the API as the plexus user (through the relay the node reaches), the node's
   * name, the runtime's plugin directory.
   */
  apiSettings(): DaemonSettings {
    return { kubeconfig: this.node.nodeKubeconfig('plexus'), nodeName: this.node.nodeName, cniBinDir: this.binDir };
  }

  /** The pods of this node through the API (their sandboxes come from the kubelet). */
  apiPods(): ApiPods {
    return new ApiPods(this.node.api, this.node.nodeName, () => {
      throw new Error('sandboxes come from the kubelet here');
    });
  }

  /**
   * Stops the node and plexusd; `thenBeforeFiles` (another process the test started) before the files go. Answers
   * what the node's stop found wrong (SingleNode.stop).
   */
  async stop(thenBeforeFiles?: () => Promise<void>): Promise<string[]> {
    const problems = this.nodeFixture
      ? await this.nodeFixture.stop({ runtimeStopped: async () => this.daemonFixture?.stop() })
      : [];
    await this.daemonFixture?.stop();
    await thenBeforeFiles?.();
    if (this.work) rmSync(this.work, { recursive: true, force: true });
    return problems;
  }
}

export function started<T>(fixture: T | undefined, what: string): T {
  if (fixture === undefined) throw new Error(`${what} is not started`);
  return fixture;
}
