/**
 * The native `memif` driver: a pod interface that is no kernel link but a memif socket, served by a port of the node's
 * userspace switch (OVS with DPDK). The switch is the memif server; the pod's application connects as the client.
 *
 * The socket and its secret come from the kubelet device the pod was allocated for the network's resourceName
 * (plexus.io/memif, served by plexusd's device plugin, mounted into the pod), or, without one, from a directory
 * Plexus makes under the network's socketDir. Its parts: attach.ts (ADD), switch.ts (the switch's ports and
 * connections), resync.ts (ports a switch lost, made again from the journal), undo.ts (its undo steps).
 */
import { ok } from '../../cni/errors';
import { onePlugin, type Driver, type DriverContext } from '../driver';
import { attachMemif, type DeviceSocketLookup, type MemifAttachDeps } from './attach';
import { parseMemifConfig, type MemifConfig } from './config';
import { PortResync } from './resync';
import { MemifSwitches } from './switch';
import { memifStepKinds, switchPortsIn } from './undo';
import { definedFields } from '../../common/defined-fields';

export interface MemifDriverOptions {
  /** The sockets of the memif devices the kubelet allocated (plexusd's device plugin). */
  readonly deviceSocket?: DeviceSocketLookup;
  readonly defaultOvsdbSocket?: string;
  /** external_ids plexus-owner of the ports made (the node's name). */
  readonly owner?: string;
}

export function createMemifDriver(options: MemifDriverOptions = {}): Driver<MemifConfig> {
  const switches = new MemifSwitches(options.defaultOvsdbSocket);
  const portResync = new PortResync(switches);
  const parse = onePlugin(parseMemifConfig);
  let context: DriverContext | undefined;
  switches.onReconnect(() => context?.requestResync('reconnected to the switch database'));
  const device = options.deviceSocket;
  const deps: MemifAttachDeps = {
    switches,
    owner: options.owner ?? 'plexus',
    ...definedFields({ deviceSocket: device }),
  };
  return {
    type: 'memif',
    capabilities: ['ips', 'deviceID'],
    parse,
    attach: (req, conf, env) => {
      portResync.markPortsSeen();
      return attachMemif(req, conf, env, deps);
    },
    check: (attachment) => switches.check(switchPortsIn(attachment.steps, switches)),
    async gc(network, live) {
      const conf = parse(network.plugins);
      return conf.ok ? switches.gc(network.key, conf.value, live, options.owner) : ok(undefined);
    },
    async status(network) {
      const conf = parse(network.plugins);
      return conf.ok ? switches.status(conf.value) : conf;
    },
    undo: memifStepKinds(switches),
    start(ctx) {
      context = ctx;
    },
    async resync(why) {
      if (context) await portResync.run(why, context);
    },
    ready: () => switches.dpdkReady(),
    stop() {
      context = undefined;
      switches.close();
    },
  };
}
