/**
 * A second, minimal DRA driver for tests, standing in for dra-driver-sriov and its kind: it registers with the
 * kubelet's plugin registry under its own name, publishes one ResourceSlice for the node whose devices carry the
 * Multus attributes k8s.cni.cncf.io/resourceName and k8s.cni.cncf.io/deviceID, and answers NodePrepareResources
 * (the claim's results of this driver, read from the API) and NodeUnprepareResources, recording each call. It moves
 * nothing: the CNI side (plexusd, consuming the claim) does that.
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import {
  DRA_PLUGIN_TYPE,
  loadDraServices,
  type ClaimRef,
  type NodePrepareResourceResponse,
  type NodePrepareResourcesRequest,
  type NodePrepareResourcesResponse,
  type NodeUnprepareResourcesRequest,
  type NodeUnprepareResourcesResponse,
  type PluginInfo,
  type RegistrationStatus,
} from '../../src/dra/api';

export interface TestDevice {
  /** The device's name in the slice (a DNS label). */
  readonly name: string;
  readonly deviceID: string;
  readonly resourceName: string;
}

type Call = (method: string, path: string, body?: unknown) => Promise<{ status: number; body: unknown }>;
type Unary<Req, Res> = (call: grpc.ServerUnaryCall<Req, Res>, cb: grpc.sendUnaryData<Res>) => void;

const RESOURCE = '/apis/resource.k8s.io/v1';

interface ClaimResults {
  status?: {
    allocation?: { devices?: { results?: { request: string; driver: string; pool: string; device: string }[] } };
  };
}

export class DraTestDriver {
  private server: grpc.Server | undefined;
  readonly registration: string;
  readonly service: string;
  /** Claim UIDs in the order the kubelet prepared, and unprepared, them. */
  readonly prepared: string[] = [];
  readonly unprepared: string[] = [];
  /** What the kubelet reported of each registration. */
  readonly registrations: RegistrationStatus[] = [];

  constructor(
    readonly driver: string,
    private readonly kubeletRoot: string,
    private readonly nodeName: string,
    private readonly call: Call,
  ) {
    this.registration = join(kubeletRoot, 'plugins_registry', `${driver}-reg.sock`);
    this.service = join(kubeletRoot, 'plugins', driver, 'dra.sock');
  }

  get pool(): string {
    return `${this.nodeName}-${this.driver}`;
  }

  /** The slice's name: one per driver and node. */
  get sliceName(): string {
    return `${this.nodeName}-${this.driver}`.replace(/[^a-z0-9.-]/g, '-');
  }

  /** A DeviceClass selecting every device of this driver. */
  async createDeviceClass(name: string): Promise<void> {
    const r = await this.call('POST', `${RESOURCE}/deviceclasses`, {
      apiVersion: 'resource.k8s.io/v1',
      kind: 'DeviceClass',
      metadata: { name },
      spec: { selectors: [{ cel: { expression: `device.driver == "${this.driver}"` } }] },
    });
    if (r.status !== 201 && r.status !== 409)
      throw new Error(`DeviceClass ${name}: ${r.status} ${JSON.stringify(r.body)}`);
  }

  /** Publishes the node's slice with these devices (generation 1). */
  async publish(devices: readonly TestDevice[]): Promise<void> {
    const r = await this.call('POST', `${RESOURCE}/resourceslices`, {
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceSlice',
      metadata: { name: this.sliceName },
      spec: {
        driver: this.driver,
        nodeName: this.nodeName,
        pool: { name: this.pool, generation: 1, resourceSliceCount: 1 },
        devices: devices.map((d) => ({
          name: d.name,
          attributes: {
            'k8s.cni.cncf.io/resourceName': { string: d.resourceName },
            'k8s.cni.cncf.io/deviceID': { string: d.deviceID },
          },
        })),
      },
    });
    if (r.status !== 201) throw new Error(`ResourceSlice ${this.sliceName}: ${r.status} ${JSON.stringify(r.body)}`);
  }

  async unpublish(): Promise<void> {
    await this.call('DELETE', `${RESOURCE}/resourceslices/${this.sliceName}`);
  }

  /** Serves the DRA service, then the registration socket the kubelet's plugin watcher finds. */
  async start(): Promise<void> {
    const services = loadDraServices();
    const server = new grpc.Server();
    const prepare: Unary<NodePrepareResourcesRequest, NodePrepareResourcesResponse> = (call, cb) => {
      void Promise.all((call.request.claims ?? []).map(async (c) => [c.uid, await this.prepareOne(c)] as const)).then(
        (answers) => cb(null, { claims: Object.fromEntries(answers) }),
      );
    };
    const unprepare: Unary<NodeUnprepareResourcesRequest, NodeUnprepareResourcesResponse> = (call, cb) => {
      const claims = call.request.claims ?? [];
      this.unprepared.push(...claims.map((c) => c.uid));
      cb(null, { claims: Object.fromEntries(claims.map((c) => [c.uid, { error: '' }])) });
    };
    server.addService(services.draPlugin.v1, { NodePrepareResources: prepare, NodeUnprepareResources: unprepare });
    const info: PluginInfo = {
      type: DRA_PLUGIN_TYPE,
      name: this.driver,
      endpoint: this.service,
      supported_versions: ['v1.DRAPlugin'],
    };
    const getInfo: Unary<unknown, PluginInfo> = (_call, cb) => cb(null, info);
    const notify: Unary<RegistrationStatus, unknown> = (call, cb) => {
      this.registrations.push(call.request);
      cb(null, {});
    };
    server.addService(services.registration, { GetInfo: getInfo, NotifyRegistrationStatus: notify });
    for (const path of [this.service, this.registration]) {
      mkdirSync(join(path, '..'), { recursive: true });
      rmSync(path, { force: true });
      await new Promise<void>((resolve, reject) => {
        server.bindAsync(`unix://${path}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve()));
      });
    }
    this.server = server;
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    rmSync(this.registration, { force: true });
    if (server) await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
    server?.forceShutdown();
    rmSync(join(this.service, '..'), { recursive: true, force: true });
  }

  /** The claim's devices of this driver, as the kubelet wants them back (no CDI: the device is a network's). */
  private async prepareOne(ref: ClaimRef): Promise<NodePrepareResourceResponse> {
    this.prepared.push(ref.uid);
    const got = await this.call('GET', `${RESOURCE}/namespaces/${ref.namespace}/resourceclaims/${ref.name}`);
    if (got.status !== 200) return { devices: [], error: `reading claim ${ref.namespace}/${ref.name}: ${got.status}` };
    const results = ((got.body as ClaimResults).status?.allocation?.devices?.results ?? []).filter(
      (r) => r.driver === this.driver,
    );
    return {
      devices: results.map((r) => ({
        request_names: [r.request],
        pool_name: r.pool,
        device_name: r.device,
        cdi_device_ids: [],
      })),
      error: '',
    };
  }
}
