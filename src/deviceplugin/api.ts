/**
 * The kubelet's gRPC APIs Plexus speaks: device plugin v1beta1 (Registration, DevicePlugin) and pod-resources v1
 * (PodResourcesLister). The .proto files live beside this module's source (src/deviceplugin/proto); the build does not
 * copy them, so they are looked up there from dist as well.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

/** The version string the kubelet expects in RegisterRequest. */
export const DEVICE_PLUGIN_API_VERSION = 'v1beta1';
export const HEALTHY = 'Healthy';
export const UNHEALTHY = 'Unhealthy';

// Message shapes as proto-loader gives them (keepCase: field names as in the .proto; no defaults filled in on decode
// beyond what `defaults: true` adds).
export interface DevicePluginOptions {
  pre_start_required?: boolean;
  get_preferred_allocation_available?: boolean;
}
export interface RegisterRequest {
  version: string;
  endpoint: string;
  resource_name: string;
  options?: DevicePluginOptions;
}
export interface Device {
  ID: string;
  health: string;
  topology?: { nodes: { ID: number | string }[] };
}
export interface ListAndWatchResponse {
  devices: Device[];
}
export interface ContainerPreferredAllocationRequest {
  available_deviceIDs: string[];
  must_include_deviceIDs: string[];
  allocation_size: number;
}
export interface PreferredAllocationRequest {
  container_requests: ContainerPreferredAllocationRequest[];
}
export interface PreferredAllocationResponse {
  container_responses: { deviceIDs: string[] }[];
}
export interface AllocateRequest {
  container_requests: { devices_ids: string[] }[];
}
export interface Mount {
  container_path: string;
  host_path: string;
  read_only: boolean;
}
export interface DeviceSpec {
  container_path: string;
  host_path: string;
  permissions: string;
}
export interface ContainerAllocateResponse {
  envs: Record<string, string>;
  mounts: Mount[];
  devices: DeviceSpec[];
  annotations: Record<string, string>;
  cdi_devices?: { name: string }[];
}
export interface AllocateResponse {
  container_responses: ContainerAllocateResponse[];
}
export interface PreStartContainerRequest {
  devices_ids: string[];
}

export interface ContainerDevices {
  resource_name: string;
  device_ids: string[];
}
export interface ContainerResources {
  name: string;
  devices: ContainerDevices[];
}
export interface PodResources {
  name: string;
  namespace: string;
  containers: ContainerResources[];
}
export interface ListPodResourcesResponse {
  pod_resources: PodResources[];
}

const LOAD_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

/** The .proto file: beside the compiled module when the image ships it there, else in the source tree. */
export function protoPath(file: string): string {
  const candidates = [
    join(__dirname, 'proto', file),
    join(__dirname, '..', '..', '..', 'src', 'deviceplugin', 'proto', file),
  ];
  const found = candidates.find((p) => existsSync(p));
  if (!found)
    throw new Error(
      `${file} not found (looked in ${candidates.join(', ')}): it ships with Plexus in src/deviceplugin/proto`,
    );
  return found;
}

let deviceApi: grpc.GrpcObject | undefined;
let podResourcesApi: grpc.GrpcObject | undefined;

/** The v1beta1 package: Registration and DevicePlugin, loaded once. */
export function devicePluginPackage(): grpc.GrpcObject {
  deviceApi ??= grpc.loadPackageDefinition(protoLoader.loadSync(protoPath('deviceplugin-v1beta1.proto'), LOAD_OPTIONS))
    .v1beta1 as grpc.GrpcObject;
  return deviceApi;
}

/** The pod-resources v1 package: PodResourcesLister, loaded once. */
export function podResourcesPackage(): grpc.GrpcObject {
  podResourcesApi ??= grpc.loadPackageDefinition(protoLoader.loadSync(protoPath('podresources-v1.proto'), LOAD_OPTIONS))
    .v1 as grpc.GrpcObject;
  return podResourcesApi;
}

export const serviceOf = (pkg: grpc.GrpcObject, name: string): grpc.ServiceClientConstructor =>
  pkg[name] as grpc.ServiceClientConstructor;

/** A message's serialize/deserialize pair, for tests of the wire format (round trips). */
export function codecOf(
  pkg: grpc.GrpcObject,
  service: string,
  method: string,
): { request: grpc.MethodDefinition<unknown, unknown> } {
  const definition = serviceOf(pkg, service).service[method];
  if (!definition) throw new Error(`${service}.${method} is not in the loaded API`);
  return { request: definition };
}

/** A unix socket path as a gRPC target. */
export const unixTarget = (path: string): string => `unix://${path}`;

/** Promisified unary call on a grpc-js client. */
export function unary<Req, Res>(client: grpc.Client, method: string, request: Req, deadlineMs: number): Promise<Res> {
  return new Promise((resolve, reject) => {
    const fn = (
      client as unknown as Record<
        string,
        (r: Req, m: grpc.Metadata, o: grpc.CallOptions, cb: (e: grpc.ServiceError | null, v: Res) => void) => void
      >
    )[method];
    if (!fn) return reject(new Error(`no method ${method}`));
    fn.call(client, request, new grpc.Metadata(), { deadline: Date.now() + deadlineMs }, (e, v) =>
      e ? reject(e) : resolve(v),
    );
  });
}

/** How long a closing server lets the calls under way finish before it cuts them. */
const SHUTDOWN_GRACE_MS = 2000;

/** Stops a kubelet-facing server: calls under way are answered, for at most two seconds, then it is forced down. */
export function shutdownServer(server: grpc.Server): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, SHUTDOWN_GRACE_MS);
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}
