/**
 * plexusd as the kubelet's DRA plugin: the DRAPlugin service (v1 and v1beta1) on <kubelet root>/plugins/plexus.io/
 * dra.sock, and the Registration service on <kubelet root>/plugins_registry/plexus.io-reg.sock, where the kubelet's
 * plugin watcher finds it, asks GetInfo and reports the outcome. Every second the sockets are checked: one removed
 * (by hand, or a cleanup of the directory) is served again, so the kubelet registers the driver again. The service
 * socket's connections are counted (kubelet-registration.ts): they tell whether the kubelet is still there.
 */
import { mkdirSync, rmSync, statSync } from 'node:fs';
import { createServer, type Server as SocketServer } from 'node:net';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import {
  DRA_PLUGIN_TYPE,
  DRIVER_NAME,
  SUPPORTED_SERVICES,
  loadDraServices,
  type NodePrepareResourcesRequest,
  type NodePrepareResourcesResponse,
  type NodeUnprepareResourcesRequest,
  type NodeUnprepareResourcesResponse,
  type PluginInfo,
  type RegistrationStatus,
} from './api';
import { KubeletRegistration, type RegistrationChange } from './kubelet-registration';
import type { ClaimPreparer } from './prepare';
import { shutdownServer } from '../kubelet/grpc';
import { errorMessage } from '../common/error-message';

export const DEFAULT_KUBELET_ROOT = '/var/lib/kubelet';

/** Where the driver's sockets go under the kubelet's --root-dir. */
export const draSockets = (kubeletRoot: string): { registration: string; service: string } => ({
  registration: join(kubeletRoot, 'plugins_registry', `${DRIVER_NAME}-reg.sock`),
  service: join(kubeletRoot, 'plugins', DRIVER_NAME, 'dra.sock'),
});

export interface RegistrationEvents {
  /** The kubelet told us the outcome of a registration (each time it registers us). */
  registered?(status: RegistrationStatus): void;
  /** Whether the kubelet knows the driver changed (kubelet-registration.ts), with the reason. */
  knownChanged?: RegistrationChange;
}

export interface PluginTiming {
  /** How often the sockets are checked (default 1 s). */
  readonly checkIntervalMs?: number;
  /** How long the kubelet may be without a connection before it counts as gone (kubelet-registration.ts). */
  readonly kubeletLostAfterMs?: number;
}

const inode = (path: string): number | undefined => {
  try {
    return statSync(path).ino;
  } catch {
    return undefined;
  }
};

type Unary<Req, Res> = (call: grpc.ServerUnaryCall<Req, Res>, cb: grpc.sendUnaryData<Res>) => void;

export class DraPluginServer {
  private readonly services = loadDraServices();
  private readonly registration: KubeletRegistration;
  private server: grpc.Server | undefined;
  private listener: SocketServer | undefined;
  private served: { registration: number; service: number } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private checking = false;
  readonly sockets: { registration: string; service: string };

  constructor(
    kubeletRoot: string,
    private readonly preparer: ClaimPreparer,
    private readonly log: Logger,
    private readonly events: RegistrationEvents = {},
    private readonly timing: PluginTiming = {},
  ) {
    this.sockets = draSockets(kubeletRoot);
    this.registration = new KubeletRegistration((known, reason) => {
      if (known) this.log.info({ driver: DRIVER_NAME, reason }, 'the kubelet knows the DRA driver');
      else this.log.warn({ driver: DRIVER_NAME, reason }, 'the kubelet does not know the DRA driver now');
      this.events.knownChanged?.(known, reason);
    }, timing.kubeletLostAfterMs);
  }

  /** Whether the kubelet has registered the driver and has not gone since: only then can it have a claim prepared. */
  get kubeletKnows(): boolean {
    return this.registration.known;
  }

  async start(): Promise<void> {
    await this.check();
    this.timer = setInterval(() => void this.check(), this.timing.checkIntervalMs ?? 1000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.close('plexusd is stopping');
    this.registration.close();
  }

  private async check(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      const now = { registration: inode(this.sockets.registration), service: inode(this.sockets.service) };
      if (this.served && now.registration === this.served.registration && now.service === this.served.service) return;
      if (this.served) this.log.info(this.sockets, 'DRA sockets gone: serving them again');
      await this.serve();
    } catch (e) {
      this.log.warn(
        { err: errorMessage(e), ...this.sockets },
        'cannot serve the DRA plugin sockets; retrying every second',
      );
    } finally {
      this.checking = false;
    }
  }

  private async serve(): Promise<void> {
    await this.close('the DRA sockets are served anew');
    for (const path of Object.values(this.sockets)) mkdirSync(join(path, '..'), { recursive: true, mode: 0o750 });
    const server = new grpc.Server();
    const internal = (e: Error): Partial<grpc.StatusObject> => ({ code: grpc.status.INTERNAL, details: e.message });
    const prepare: Unary<NodePrepareResourcesRequest, NodePrepareResourcesResponse> = (call, cb) => {
      this.preparer.prepare(call.request.claims ?? []).then(
        (claims) => cb(null, { claims }),
        (e: Error) => cb(internal(e)),
      );
    };
    const unprepare: Unary<NodeUnprepareResourcesRequest, NodeUnprepareResourcesResponse> = (call, cb) => {
      this.preparer.unprepare(call.request.claims ?? []).then(
        (claims) => cb(null, { claims }),
        (e: Error) => cb(internal(e)),
      );
    };
    for (const version of ['v1', 'v1beta1'] as const) {
      server.addService(this.services.draPlugin[version], {
        NodePrepareResources: prepare,
        NodeUnprepareResources: unprepare,
      });
    }
    const info: PluginInfo = {
      type: DRA_PLUGIN_TYPE,
      name: DRIVER_NAME,
      endpoint: this.sockets.service,
      supported_versions: [...SUPPORTED_SERVICES],
    };
    const getInfo: Unary<unknown, PluginInfo> = (_call, cb) => cb(null, info);
    const notify: Unary<RegistrationStatus, unknown> = (call, cb) => {
      const status = call.request;
      if (status.plugin_registered)
        this.log.info({ driver: DRIVER_NAME }, 'registered with the kubelet as a DRA driver');
      else
        this.log.warn({ driver: DRIVER_NAME, err: status.error }, "the kubelet refused the DRA driver's registration");
      this.events.registered?.(status);
      this.registration.notified(status);
      cb(null, {});
    };
    server.addService(this.services.registration, { GetInfo: getInfo, NotifyRegistrationStatus: notify });
    this.server = server;
    // The service socket first: the kubelet dials it as soon as it has seen the registration socket.
    this.listener = await this.listenCounted(server, this.sockets.service);
    rmSync(this.sockets.registration, { force: true });
    await new Promise<void>((resolve, reject) => {
      const address = `unix://${this.sockets.registration}`;
      server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve()));
    });
    this.served = { registration: inode(this.sockets.registration) ?? -1, service: inode(this.sockets.service) ?? -1 };
  }

  /** The service socket, each connection counted while open and handed to the gRPC server. */
  private async listenCounted(server: grpc.Server, path: string): Promise<SocketServer> {
    const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
    const listener = createServer((socket) => {
      this.registration.connectionOpened();
      socket.once('close', () => this.registration.connectionClosed());
      injector.injectConnection(socket);
    });
    rmSync(path, { force: true });
    await new Promise<void>((resolve, reject) => {
      listener.once('error', reject);
      listener.listen(path, () => {
        listener.off('error', reject);
        resolve();
      });
    });
    return listener;
  }

  private async close(reason: string): Promise<void> {
    const server = this.server;
    const listener = this.listener;
    this.server = undefined;
    this.listener = undefined;
    this.served = undefined;
    // The registration socket goes first: the kubelet deregisters the driver when it disappears, so it stops sending
    // calls before the service socket stops taking them (calls under way are answered before the server closes).
    rmSync(this.sockets.registration, { force: true });
    this.registration.deregistered(reason);
    listener?.close();
    if (server) await shutdownServer(server);
    rmSync(this.sockets.service, { force: true });
  }
}
