/**
 * The `memif` network's config: a port on a userspace (OVS-DPDK) bridge per pod interface, reached by the pod over
 * a memif socket. Validated up front, so nothing is made for a config the switch would refuse.
 *
 *   { "type": "memif", "bridge": "br-user", "rxQueues": 2, "ovsdbSocket": "/var/run/openvswitch/db.sock" }
 */
import { z } from 'zod';
import { absolutePath } from '../../common/absolute-path';
import type { Result } from '../../cni/errors';
import { err, ok } from '../../cni/errors';
import type { IpamConfig } from '../../ipam';
import type { PluginConfig } from '../../networks/nad';
import { invalidConfig, ipamField, parseOptionalIpam, parsePluginConfig } from '../common/config';
import { definedFields } from '../../common/defined-fields';

/** Where a pod's socket directory is made when no kubelet device (plexus.io/memif) gave it one. */
export const DEFAULT_MEMIF_SOCKET_DIR = '/run/plexus/memif-cni';

const MemifSchema = z.object({
  type: z.literal('memif'),
  /** An OVS bridge of datapath_type netdev; the operator's, never made or removed by Plexus. */
  bridge: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/, 'must be an OVS bridge name (letters, digits, "_", "." and "-")'),
  /** The switch port's receive queues (OVS n_rxq): the pod's transmit queues may not exceed them. */
  rxQueues: z.number().int().min(1).max(16).default(1),
  /** memif mode; OVS-DPDK's memif ports carry Ethernet frames only. */
  mode: z.literal('ethernet').default('ethernet'),
  /** The switch's database socket; plexusd's --ovsdb-socket when unset. */
  ovsdbSocket: absolutePath().optional(),
  /** Host directory for sockets Plexus makes itself (no kubelet device): one subdirectory per pod interface. */
  socketDir: absolutePath().default(DEFAULT_MEMIF_SOCKET_DIR),
  ipam: ipamField,
});

export interface MemifConfig {
  readonly bridge: string;
  readonly rxQueues: number;
  readonly mode: 'ethernet';
  readonly ovsdbSocket?: string;
  readonly socketDir: string;
  readonly ipam?: IpamConfig;
}

export function parseMemifConfig(plugin: PluginConfig): Result<MemifConfig> {
  const c = parsePluginConfig(MemifSchema, plugin);
  if (!c.ok) return c;
  // DPDK splits devargs at commas, and a unix socket path holds at most 107 bytes.
  if (c.value.socketDir.includes(','))
    return err(
      invalidConfig(
        plugin,
        `socketDir "${c.value.socketDir}" may not contain a comma (DPDK device arguments are comma-separated)`,
      ),
    );
  if (Buffer.byteLength(c.value.socketDir) > 60)
    return err(
      invalidConfig(
        plugin,
        `socketDir "${c.value.socketDir}" is longer than 60 bytes: a socket path under it would not fit a unix socket address (107 bytes)`,
      ),
    );
  const ipam = parseOptionalIpam(plugin, c.value.ipam);
  if (!ipam.ok) return ipam;
  return ok({
    bridge: c.value.bridge,
    rxQueues: c.value.rxQueues,
    mode: c.value.mode,
    ...definedFields({ ovsdbSocket: c.value.ovsdbSocket || undefined }),
    socketDir: c.value.socketDir,
    ...definedFields({ ipam: ipam.value }),
  });
}
