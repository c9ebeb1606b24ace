/** The errors of talking to the switch: what Open vSwitch did or did not do, and where to look. */
import { CniCode, CniError } from '../cni/errors';

export const ovsErrors = {
  unreachable: (path: string, why: string): CniError =>
    new CniError(
      CniCode.TryAgainLater,
      `the Open vSwitch database at ${path} cannot be reached: ${why}`,
      'is ovsdb-server running, and is this its socket? ' +
        '(the memif network\'s "ovsdbSocket", or plexusd\'s --ovsdb-socket)',
    ),
  portNotOpened: (port: string, bridge: string, why: string, devargs: string): CniError =>
    new CniError(
      CniCode.Internal,
      `the switch could not open port ${port} on bridge ${bridge}: ${why}`,
      `devargs ${devargs}; is ovs-vswitchd DPDK-enabled (other_config:dpdk-init=true, hugepages) ` +
        `and ${bridge} of datapath_type netdev?`,
    ),
  noBridge: (bridge: string): CniError =>
    new CniError(
      CniCode.InvalidNetworkConfig,
      `the switch has no bridge ${bridge}`,
      'create it first: ovs-vsctl add-br BRIDGE -- set bridge BRIDGE datapath_type=netdev',
    ),
  notApplied: (timeoutMs: number, current: number, target: number): CniError =>
    new CniError(
      CniCode.TryAgainLater,
      `ovs-vswitchd did not apply the change within ${timeoutMs} ms (cur_cfg ${current}, waiting for ${target})`,
      'is ovs-vswitchd running and connected to this database?',
    ),
};

/** What a port past DPDK's build-time ceiling fails with adds nothing: say what the ceiling is. */
export const dpdkCeilingHint = (ports: number, ceiling: number): string =>
  `; the switch already has ${ports} DPDK ports, and DPDK as Debian builds it allows ${ceiling} per switch ` +
  '(RTE_MAX_ETHPORTS)';
