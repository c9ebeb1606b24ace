/**
 * The bridge networks of one test file: network `i` runs on the host bridge `${prefix}b${i}`, with host-local
 * addresses from 10.O.(T+i).0/24. O is drawn from the 50 values from `firstOctet` on and T at random, so that test
 * files run one after another on one host, or a test's leftovers, do not meet in one subnet.
 */
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
export interface BridgeOptions {
  /** The plugin type (a wrapper of the bridge plugin, say); `bridge` by default. */
  readonly type?: string;
  /** Whether the bridge is the pods' gateway (their default route); true by default. */
  readonly isGateway?: boolean;
  /** host-local's routes. */
  readonly routes?: readonly unknown[];
}

export interface TestBridges {
  /** The CNI config of network `name`, the test's bridge number `i`. */
  config(name: string, i: number, options?: BridgeOptions): string;
  /** Matches an IPv4 address of bridge `i`'s subnet in `ip -o -4 addr` output. */
  subnetOf(i: number): RegExp;
}

export function testBridges(prefix: string, firstOctet: number): TestBridges {
  const o = firstOctet + Math.floor(Math.random() * 50);
  const t = Math.floor(Math.random() * 200);
  return {
    config: (name, i, { type = 'bridge', isGateway = true, routes } = {}) =>
      JSON.stringify({
        cniVersion: '1.0.0',
        name,
        type,
        bridge: `${prefix}b${i}`,
        ...(isGateway ? { isGateway } : {}),
        ipam: { type: 'host-local', ranges: [[{ subnet: `10.${o}.${t + i}.0/24` }]], ...(routes ? { routes } : {}) },
      }),
    subnetOf: (i) => new RegExp(`inet 10\\.${o}\\.${t + i}\\.`),
  };
}

/**
 * host-local's default store of a network whose bridge is delegated (another `type`: the reference plugin runs it,
 * and its host-local keeps leases in /var/lib/cni/networks/<name>, not plexusd's --host-local-data-dir). Answers what
 * removes that store after the test, unless it was there before.
 */
export function delegatedLeaseStore(name: string): () => void {
  const path = join('/var/lib/cni/networks', name);
  const wasThere = existsSync(path);
  return () => {
    if (!wasThere) rmSync(path, { recursive: true, force: true });
  };
}
