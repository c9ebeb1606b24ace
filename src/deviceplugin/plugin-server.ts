/**
 * One resource as a kubelet device plugin: a gRPC server on its own socket in the kubelet's device-plugins
 * directory, registered with the kubelet (Registration.Register on kubelet.sock), answering ListAndWatch,
 * GetPreferredAllocation and Allocate.
 *
 * The kubelet wipes that directory when it starts, so a restarted kubelet knows no plugin: every second the plugin
 * checks that its socket is still there and that kubelet.sock is the one it registered with, and if not, serves a
 * new socket and registers again. Until the kubelet is up, registration is retried on the same tick.
 */
import { serviceOf, shutdownServer, unary, unixTarget } from '../kubelet/grpc';
import { rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import {
  DEVICE_PLUGIN_API_VERSION,
  devicePluginPackage,
  type AllocateRequest,
  type AllocateResponse,
  type ListAndWatchResponse,
  type PreferredAllocationRequest,
  type PreferredAllocationResponse,
  type RegisterRequest,
} from './api';
import type { DeviceResource } from './resources';
import { errorMessage } from '../common/error-message';

export const DEFAULT_DEVICE_PLUGIN_DIR = '/var/lib/kubelet/device-plugins';
export const KUBELET_SOCKET = 'kubelet.sock';

/** The socket's file name for a resource: plexus.io/memif is plexus-plexus.io-memif.sock. */
export const endpointFor = (resourceName: string): string => `plexus-${resourceName.replaceAll('/', '-')}.sock`;

const inode = (path: string): number | undefined => {
  try {
    return statSync(path).ino;
  } catch {
    return undefined;
  }
};

export interface PluginEvents {
  /** The kubelet accepted the registration (each time: at start and after each kubelet restart). */
  registered?(resourceName: string, at: number): void;
}

export class ResourcePlugin {
  private server: grpc.Server | undefined;
  private readonly streams = new Set<grpc.ServerWritableStream<unknown, ListAndWatchResponse>>();
  private stopWatching: (() => void) | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Inodes of our socket and of the kubelet's when we last registered. */
  private registeredWith: { ours: number; kubelet: number } | undefined;
  private checking = false;
  private stopped = false;
  private lastFailure = '';

  readonly socketPath: string;

  constructor(
    readonly resource: DeviceResource,
    private readonly dir: string,
    private readonly log: Logger,
    private readonly events: PluginEvents = {},
    private readonly checkIntervalMs = 1000,
  ) {
    this.socketPath = join(dir, endpointFor(resource.name));
  }

  /** Serves and registers (or keeps trying to, every second, while the kubelet is away). */
  async start(): Promise<void> {
    this.stopWatching = this.resource.watch(() => this.broadcast());
    await this.check();
    this.timer = setInterval(() => void this.check(), this.checkIntervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.stopWatching?.();
    await this.closeServer();
  }

  /** Sends every open ListAndWatch stream the current devices. */
  broadcast(): void {
    const list = { devices: this.resource.devices() };
    for (const s of this.streams) s.write(list);
  }

  private async check(): Promise<void> {
    if (this.checking || this.stopped) return;
    this.checking = true;
    try {
      const ours = inode(this.socketPath);
      const kubelet = inode(join(this.dir, KUBELET_SOCKET));
      if (this.registeredWith && ours === this.registeredWith.ours && kubelet === this.registeredWith.kubelet) return;
      if (kubelet === undefined) return this.failed(`no ${KUBELET_SOCKET} in ${this.dir} yet`);
      if (ours === undefined || !this.server) {
        if (this.registeredWith)
          this.log.info(
            { resource: this.resource.name },
            'device plugin socket gone (the kubelet restarted): serving it again',
          );
        await this.serve();
      }
      await this.register();
      this.registeredWith = { ours: inode(this.socketPath) ?? -1, kubelet };
      this.lastFailure = '';
      this.events.registered?.(this.resource.name, performance.now());
      this.log.info(
        { resource: this.resource.name, socket: this.socketPath, devices: this.resource.devices().length },
        'registered with the kubelet',
      );
    } catch (e) {
      this.failed(errorMessage(e));
    } finally {
      this.checking = false;
    }
  }

  private failed(why: string): void {
    this.registeredWith = undefined;
    if (why !== this.lastFailure)
      this.log.warn(
        { resource: this.resource.name, why },
        'not registered with the kubelet yet; retrying every second',
      );
    this.lastFailure = why;
  }

  private async serve(): Promise<void> {
    await this.closeServer();
    rmSync(this.socketPath, { force: true });
    const server = new grpc.Server();
    server.addService(serviceOf(devicePluginPackage(), 'DevicePlugin').service, {
      GetDevicePluginOptions: (_call: unknown, cb: grpc.sendUnaryData<unknown>) =>
        cb(null, { pre_start_required: false, get_preferred_allocation_available: true }),
      ListAndWatch: (call: grpc.ServerWritableStream<unknown, ListAndWatchResponse>) => {
        this.streams.add(call);
        const done = (): void => {
          this.streams.delete(call);
        };
        call.on('cancelled', done);
        call.on('close', done);
        call.on('error', done);
        call.write({ devices: this.resource.devices() });
      },
      GetPreferredAllocation: (
        call: grpc.ServerUnaryCall<PreferredAllocationRequest, PreferredAllocationResponse>,
        cb: grpc.sendUnaryData<PreferredAllocationResponse>,
      ) => {
        cb(null, {
          container_responses: call.request.container_requests.map((r) => ({
            deviceIDs: this.resource.preferred(r.available_deviceIDs, r.must_include_deviceIDs, r.allocation_size),
          })),
        });
      },
      Allocate: (
        call: grpc.ServerUnaryCall<AllocateRequest, AllocateResponse>,
        cb: grpc.sendUnaryData<AllocateResponse>,
      ) => {
        const responses: AllocateResponse['container_responses'] = [];
        for (const r of call.request.container_requests) {
          const one = this.resource.allocate(r.devices_ids);
          if (!one.ok) {
            this.log.warn(
              { resource: this.resource.name, devices: r.devices_ids, err: one.error.message },
              'Allocate refused',
            );
            return cb({ code: grpc.status.INVALID_ARGUMENT, details: one.error.message });
          }
          responses.push(one.value);
        }
        this.log.info(
          { resource: this.resource.name, devices: call.request.container_requests.map((r) => r.devices_ids) },
          'allocated',
        );
        cb(null, { container_responses: responses });
      },
      PreStartContainer: (_call: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, {}),
    });
    await new Promise<void>((resolve, reject) =>
      server.bindAsync(unixTarget(this.socketPath), grpc.ServerCredentials.createInsecure(), (e) =>
        e ? reject(e) : resolve(),
      ),
    );
    this.server = server;
  }

  private async register(): Promise<void> {
    const Registration = serviceOf(devicePluginPackage(), 'Registration');
    const client = new Registration(unixTarget(join(this.dir, KUBELET_SOCKET)), grpc.credentials.createInsecure());
    try {
      const request: RegisterRequest = {
        version: DEVICE_PLUGIN_API_VERSION,
        endpoint: endpointFor(this.resource.name),
        resource_name: this.resource.name,
        options: { pre_start_required: false, get_preferred_allocation_available: true },
      };
      await unary(client, 'Register', request, 5000);
    } finally {
      client.close();
    }
  }

  private async closeServer(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.streams) s.end();
    this.streams.clear();
    if (server) await shutdownServer(server);
    rmSync(this.socketPath, { force: true });
  }
}
