/**
 * The one L2 segment the API-server tests' pods share: macvlans in bridge mode on a master the test makes, a veth
 * `${prefix}m0` whose peer `${prefix}m1` is up too.
 */
import { ip, type NetnsFixture } from './netns';

export interface MacvlanSegment {
  /** The master's name, for a NAD written out by hand. */
  readonly master: string;
  /** A NAD's CNI config: a macvlan on the master, taking static IPs, its addresses from `ipam`. */
  nad(network: string, ipam: Record<string, unknown>): string;
  /** Makes the master (removed by `fx`'s cleanup). */
  create(fx: NetnsFixture): void;
}

export function macvlanSegment(prefix: string): MacvlanSegment {
  const master = `${prefix}m0`;
  return {
    master,
    nad: (network, ipam) =>
      JSON.stringify({
        cniVersion: '1.0.0',
        name: network,
        type: 'macvlan',
        master,
        mode: 'bridge',
        capabilities: { ips: true },
        ipam,
      }),
    create: (fx) => {
      fx.trackHostLink(master);
      ip('link', 'add', master, 'type', 'veth', 'peer', 'name', `${prefix}m1`);
      ip('link', 'set', master, 'up');
      // The peer up too, so the master has a carrier: without one a macvlan's IPv6 addresses never leave DAD's
      // tentative state, and the ADD fails as the reference plugin's does (code 11, still tentative).
      ip('link', 'set', `${prefix}m1`, 'up');
    },
  };
}
