/**
 * A real node running Plexus, as the kubelet tests use it: a KubeNodeFixture (kube-apiserver, containerd, kubelet)
 * whose runtime calls plexus-cni, the Plexus CRDs installed, and a plexusd made for it, not started: each test creates
 * its NADs and adds its own settings to `apiSettings()` before it starts the daemon. `stop()` removes whatever `start()` got
 * to, even after a failure half-way: the node first (plexusd serves the runtime's DELs while it stops the pods'
 * sandboxes), then the daemon, then the work directory.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiPods } from './api-pods';
import { DaemonFixture } from './daemon';
import { KubeNodeFixture, plexusConflist } from './kube-node';
import type { DaemonSettings } from './daemon-flags';
import { plexusPluginDir } from './plugin-dir';

export interface PlexusNodeOptions {
  /** Names the work directory (plexus-PREFIX-...). */
  readonly prefix: string;
  /** Host links the tests' networks make (their bridges), removed with the node. */
  readonly ownedLinks: readonly string[];
  /** plexusd's settings known before the node is up (more are added with addSettings). */
  readonly daemonSettings?: DaemonSettings;
  /** Runs a scheduler and a controller-manager too (DRA needs them). */
  readonly controlPlane?: boolean;
  /** The cniVersion of the runtime's conflist (plexusConflist: 1.0.0 by default). */
  readonly cniVersion?: string;
  /** Runs before the node starts (a plexusd without the API that the node's readiness waits for, say). */
  readonly beforeNode?: (daemon: DaemonFixture) => Promise<void>;
}

export class PlexusNodeFixture {
  work = '';
  /** The runtime's CNI plugin directory: the reference plugins and plexus-cni. */
  binDir = '';
  private daemonFixture?: DaemonFixture;
  private nodeFixture?: KubeNodeFixture;

  get daemon(): DaemonFixture {
    return started(this.daemonFixture, 'plexusd');
  }
  get node(): KubeNodeFixture {
    return started(this.nodeFixture, 'the node');
  }

  async start(options: PlexusNodeOptions): Promise<void> {
    this.work = mkdtempSync(join(tmpdir(), `plexus-${options.prefix}-`));
    this.binDir = plexusPluginDir(join(this.work, 'bin'));
    this.daemonFixture = new DaemonFixture('podnet', options.daemonSettings);
    await options.beforeNode?.(this.daemonFixture);
    this.nodeFixture = await KubeNodeFixture.start({
      cniBinDir: this.binDir,
      controlPlane: options.controlPlane,
      ownedLinks: [...options.ownedLinks],
      cniConfList: plexusConflist(this.daemon.socket, options.cniVersion),
    });
    await this.node.api.installPlexus();
  }

  /** plexusd's settings for this node: the API as the plexus user, the node's name, the runtime's plugin directory. */
  apiSettings(): DaemonSettings {
    return { kubeconfig: this.node.api.userKubeconfig('plexus'), nodeName: this.node.nodeName, cniBinDir: this.binDir };
  }

  /** The pods of this node through the API (their sandboxes come from the kubelet). */
  apiPods(): ApiPods {
    return new ApiPods(this.node.api, this.node.nodeName, () => {
      throw new Error('sandboxes come from the kubelet here');
    });
  }

  /**
   * Stops the node and plexusd; `thenBeforeFiles` (another process the test started) before the files go. Answers
   * what the node's stop found wrong (KubeNodeFixture.stop).
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
