/**
 * ADD of a memif interface: its socket (a kubelet device's, or a directory Plexus makes), its addresses, then its
 * port on the switch. Each change is recorded before it is made: the socket directory, then the port, with everything
 * it was made with, so a switch that lost its ports gets them back from the journal (resync.ts).
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import { memifSecret, MEMIF_SOCKET_FILE } from '../../common/memif';
import { OWNER_KEY, type DpdkPortSpec } from '../../ovs/ports';
import { allocatePodIps } from '../common';
import { attachmentHash } from '../common/attachment-id';
import type { AttachRequest, DriverEnv } from '../driver';
import type { MemifConfig } from './config';
import type { MemifSwitches } from './switch';
import { socketDirStep, switchPortStep } from './undo';
import { errorMessage } from '../../common/error-message';
import { definedFields } from '../../common/defined-fields';

/** The socket of a memif device the kubelet allocated to the pod. */
export interface MemifDeviceSocket {
  /** Where the switch listens (on the host). */
  readonly hostSocket: string;
  /** Where the pod finds it (the device's mount). */
  readonly podSocket: string;
  readonly secret: string;
}

/**
 * A kubelet device's socket: undefined when the resource is not a memif resource of this plexusd; an error when it
 * is but the device has no allocation on record.
 */
export type DeviceSocketLookup = (resourceName: string, deviceID: string) => Result<MemifDeviceSocket> | undefined;

/** What an attach needs besides the request: the node's switches, its device sockets, the ports' owner. */
export interface MemifAttachDeps {
  readonly switches: MemifSwitches;
  readonly deviceSocket?: DeviceSocketLookup;
  /** external_ids plexus-owner of the ports made (the node's name). */
  readonly owner: string;
}

const SOCKET_PATH_MAX = 107;

/** A switch port name for a pod interface: short, unique per attachment (attachment-id.ts), recognisably Plexus's. */
export const memifPortName = (containerId: string, runtimeIfname: string, podIfname: string): string =>
  `pxm${attachmentHash(containerId, runtimeIfname, podIfname, 12)}`;

export const memifDevargs = (port: string, socket: string, secret: string): string =>
  `net_memif_${port},role=server,id=0,socket=${socket},socket-abstract=no,secret=${secret}`;

export async function attachMemif(
  req: AttachRequest,
  conf: MemifConfig,
  env: DriverEnv,
  deps: MemifAttachDeps,
): Promise<Result<CniResult>> {
  const socket = await socketFor(req, conf, env, deps.deviceSocket);
  if (!socket.ok) return socket;
  const { hostSocket, podSocket, secret } = socket.value;
  if (hostSocket.includes(',') || Buffer.byteLength(hostSocket) > SOCKET_PATH_MAX)
    return err(unusableSocket(hostSocket));
  const spec = portSpec(req, conf, memifDevargs(portOf(req), hostSocket, secret), deps.owner);
  const ovsdb = deps.switches.ovsdbOf(conf);
  const ipam = await allocatePodIps(req, env, conf.ipam);
  if (!ipam.ok) return ipam;
  await env.record(switchPortStep({ ovsdb, ...spec }));
  const made = await deps.switches.add(ovsdb, spec);
  if (!made.ok) return err(made.error.withContext(`network ${req.network.key}`));
  const dns = ipam.value?.dns;
  return ok({
    // No sandbox: the interface is the socket, not a link in the pod's netns.
    interfaces: [{ name: req.ifname, socketPath: podSocket }],
    ips: (ipam.value?.ips ?? []).map((ip) => ({ ...ip, interface: 0 })),
    routes: [],
    ...definedFields({ dns }),
  });
}

const portOf = (req: AttachRequest): string => memifPortName(req.containerId, req.runtimeIfname, req.ifname);

/** The port as it is made and journaled; its external_ids say whose it is (GC and operators read them). */
function portSpec(req: AttachRequest, conf: MemifConfig, devargs: string, owner: string): DpdkPortSpec {
  const pod: Record<string, string> =
    req.pod.namespace && req.pod.name ? { 'plexus-pod': `${req.pod.namespace}/${req.pod.name}` } : {};
  return {
    bridge: conf.bridge,
    port: portOf(req),
    devargs,
    rxQueues: conf.rxQueues,
    externalIds: {
      [OWNER_KEY]: owner,
      'plexus-network': req.network.key,
      'plexus-container-id': req.containerId,
      'plexus-ifname': req.ifname,
      ...pod,
      'plexus-created': String(Date.now()),
    },
  };
}

/** The pod's socket: its kubelet device's, or one in a directory made (and recorded) for this attachment. */
async function socketFor(
  req: AttachRequest,
  conf: MemifConfig,
  env: DriverEnv,
  deviceSocket: DeviceSocketLookup | undefined,
): Promise<Result<MemifDeviceSocket>> {
  const device = req.options?.kubeletDevice;
  if (device)
    return deviceSocket?.(device.resourceName, device.deviceID) ?? err(notMemifResource(req, device.resourceName));
  const dir = join(conf.socketDir, socketDirName(req));
  const hostSocket = join(dir, MEMIF_SOCKET_FILE);
  await env.record(socketDirStep(dir));
  const secret = memifSecret();
  try {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    // The client needs the secret too: it lies beside the socket, readable by root only.
    writeFileSync(join(dir, 'secret'), secret, { mode: 0o600 });
  } catch (e) {
    return err(new CniError(CniCode.IoFailure, `cannot make memif socket directory ${dir}: ${errorMessage(e)}`));
  }
  return ok({ hostSocket, podSocket: hostSocket, secret });
}

/** The socket directory's name: container and pod interface, and the attachment's hash when the runtime's is another. */
function socketDirName(req: AttachRequest): string {
  const base = `${req.containerId.slice(0, 24)}-${req.ifname}`;
  if (req.runtimeIfname === req.ifname) return base;
  return `${base}-${attachmentHash(req.containerId, req.runtimeIfname, req.ifname, 8)}`;
}

const notMemifResource = (req: AttachRequest, resource: string): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `network ${req.network.key} asks for resource ${resource}, which is not a memif resource of this node's plexusd`,
    'list it under resources (kind: memif) in --device-plugin-config',
  );

const unusableSocket = (path: string): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `memif socket path ${path} cannot be used: it must have no comma and at most ${SOCKET_PATH_MAX} bytes`,
  );
