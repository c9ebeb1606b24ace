/**
 * The node Multus's e2e scenarios run on: a SingleNode whose cluster network is kind's `kindnet` (ptp + host-local
 * on 10.244.1.0/24, default route via 10.244.1.1) given as the path of a `.conflist`, with the reference plugins 1.9.1,
 * and as its CNI either Plexus (plexusd reading the API, the conflist as its default network) or the real Multus v4.3.0
 * thin plugin (its `clusterNetwork` that path), as PLEXUS_SCENARIO_CNI says (`plexus`, the default, or `multus`).
 * Either runs inside the node (plexusd on its launcher, Multus exec'd by its containerd), reaching the API through
 * the node's relay. `stop()` removes whatever `start()` got to, even after a failure half-way.
 */
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { DaemonFixture, SHIM } from './daemon';
import { plexusConflist } from './kube-node';
import { SingleNode } from './cluster/single-node';
import { multusPluginDir } from './multus';
import { ip } from './netns';
import { referencePluginDir, referencePlugins } from './plugin-dir';

export type ScenarioCni = 'plexus' | 'multus';

/** The CNI the scenarios run with: PLEXUS_SCENARIO_CNI (`plexus` in CI; `multus` to record Multus's results once). */
export function scenarioCni(env: NodeJS.ProcessEnv = process.env): ScenarioCni {
  const v = env.PLEXUS_SCENARIO_CNI ?? 'plexus';
  if (v !== 'plexus' && v !== 'multus') throw new Error(`PLEXUS_SCENARIO_CNI is plexus or multus, not ${v}`);
  return v;
}

export const CLUSTER_NETWORK = 'kindnet';
export const CLUSTER_GATEWAY = '10.244.1.1';

/** kind's kindnet conflist (its portmap plugin left out: no scenario maps a port), leases under `ipamDir`. */
const kindnet = (ipamDir: string): string =>
  JSON.stringify({
    cniVersion: '0.3.1',
    name: CLUSTER_NETWORK,
    plugins: [
      {
        type: 'ptp',
        ipMasq: false,
        mtu: 1500,
        ipam: {
          type: 'host-local',
          dataDir: ipamDir,
          routes: [{ dst: '0.0.0.0/0' }],
          ranges: [[{ subnet: '10.244.1.0/24' }]],
        },
      },
    ],
  });

/** Multus's `passthru` plugin (cmd/passthru-cni): ADD prints an empty result, DEL does nothing. Not in ../shared/multus. */
const PASSTHRU = `#!/bin/sh
case "$CNI_COMMAND" in
ADD) printf '{"cniVersion":"%s","interfaces":[],"ips":[],"routes":[],"dns":{}}' "$(jq -r .cniVersion)" ;;
VERSION) printf '{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}' ;;
*) cat >/dev/null ;;
esac
`;

export interface ScenarioNodeOptions {
  readonly cni: ScenarioCni;
  /** Names the work directory, the node (`<prefix>-n1`) and the links the scenarios' networks use. */
  readonly prefix: string;
}

export class ScenarioNode {
  work = '';
  binDir = '';
  /** The cluster network's `.conflist`: chained directories are looked for beside it. */
  clusterNetwork = '';
  /** The cluster network's host-local leases (`<ipamDir>/kindnet/<ip>`). */
  ipamDir = '';
  /** The macvlan scenarios' master (kind's eth1): a veth made in the node's network namespace. */
  master = '';
  daemon: DaemonFixture | undefined;
  private nodeFixture: SingleNode | undefined;
  private multusConf: Record<string, unknown> | undefined;

  constructor(readonly options: ScenarioNodeOptions) {}

  get node(): SingleNode {
    if (!this.nodeFixture) throw new Error('the node is not started');
    return this.nodeFixture;
  }

  async start(): Promise<void> {
    const { prefix, cni } = this.options;
    this.work = mkdtempSync(join(tmpdir(), `plexus-${prefix}-`));
    this.binDir = join(this.work, 'bin');
    this.ipamDir = join(this.work, 'ipam');
    this.clusterNetwork = join(this.work, 'net.d', `10-${CLUSTER_NETWORK}.conflist`);
    mkdirSync(dirname(this.clusterNetwork), { recursive: true });
    writeFileSync(this.clusterNetwork, kindnet(this.ipamDir));
    this.master = `${prefix}m`;
    if (cni === 'plexus') {
      referencePluginDir(this.binDir, referencePlugins());
      copyFileSync(SHIM, join(this.binDir, 'plexus-cni'));
      this.daemon = new DaemonFixture(this.clusterNetwork, { cniBinDir: this.binDir });
      this.nodeFixture = await SingleNode.start({
        cniBinDir: this.binDir,
        cniConfList: plexusConflist(this.daemon.socket),
        prefix,
      });
      this.daemon.launcher = this.node.launcher;
      this.daemon.addSettings({ kubeconfig: this.node.nodeKubeconfig('plexus'), nodeName: this.node.nodeName });
      await this.daemon.start(30000);
    } else {
      multusPluginDir(this.binDir, referencePlugins());
      writeFileSync(join(this.binDir, 'passthru'), PASSTHRU, { mode: 0o755 });
      this.nodeFixture = await SingleNode.start({ cniBinDir: this.binDir, cniConfList: kindnet(this.ipamDir), prefix });
      this.multusConf = {
        cniVersion: '0.4.0',
        name: 'multus-cni-network',
        type: 'multus',
        // What the admin's kubeconfig gave it on the host, as a process in the node reaches the API.
        kubeconfig: this.node.nodeKubeconfig('multus', ['system:masters']),
        cniDir: join(this.work, 'multus-cache'),
        binDir: this.binDir,
        clusterNetwork: this.clusterNetwork,
        capabilities: { 'io.kubernetes.cri.pod-annotations': true },
      };
      await this.writeMultusConf();
    }
    // The ServiceAccount admission wants sa/default to exist: the controller-manager makes it, maybe not yet.
    const sa = await this.node.call('POST', '/api/v1/namespaces/default/serviceaccounts', {
      apiVersion: 'v1',
      kind: 'ServiceAccount',
      metadata: { name: 'default' },
    });
    if (sa.status !== 201 && sa.status !== 409) throw new Error(`creating sa/default: ${sa.status}`);
    ip('-n', this.node.netns, 'link', 'add', this.master, 'type', 'veth', 'peer', 'name', `${prefix}mp`);
    ip('-n', this.node.netns, 'link', 'set', this.master, 'up');
  }

  /**
   * The CNI restarted with Multus's `auxiliaryCNIChainName` (the chain beside the cluster network's file): Multus's
   * config gets the key, plexusd is restarted with `--auxiliary-chain`, as plexus-install carries it over.
   */
  async setAuxiliaryChain(name: string): Promise<void> {
    if (this.daemon) {
      await this.daemon.kill('SIGTERM');
      this.daemon.addSettings({ auxiliaryChain: join(dirname(this.clusterNetwork), name) });
      await this.daemon.start(30000);
    } else {
      this.multusConf = { ...this.multusConf, auxiliaryCNIChainName: name };
      await this.writeMultusConf();
    }
  }

  /** Multus's config as its thin DaemonSet writes it; containerd picks it up within a second or so. */
  private async writeMultusConf(): Promise<void> {
    const path = join(this.node.cniConfDir, '00-multus.conf');
    writeFileSync(`${path}.new`, JSON.stringify(this.multusConf, null, 2));
    copyFileSync(`${path}.new`, path);
    rmSync(`${path}.new`);
    await new Promise((r) => setTimeout(r, 2000));
  }

  async stop(): Promise<void> {
    // plexusd serves the runtime's DELs while the node stops the sandboxes; then it goes.
    await this.nodeFixture?.stop({ runtimeStopped: async () => this.daemon?.kill('SIGTERM') });
    await this.daemon?.stop();
    if (this.work) rmSync(this.work, { recursive: true, force: true });
  }
}
