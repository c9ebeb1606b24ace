/**
 * The kubelet's gRPC APIs the device plugin speaks: device plugin v1beta1 (Registration, DevicePlugin) and
 * pod-resources v1 (PodResourcesLister), their messages and packages. The .proto files and the gRPC kit it shares
 * with the DRA driver are in src/kubelet.
 */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { PROTO_LOAD_OPTIONS, protoPath } from '../kubelet/grpc';

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

let deviceApi: grpc.GrpcObject | undefined;
let podResourcesApi: grpc.GrpcObject | undefined;

/** The v1beta1 package: Registration and DevicePlugin, loaded once. */
export function devicePluginPackage(): grpc.GrpcObject {
  deviceApi ??= grpc.loadPackageDefinition(
    protoLoader.loadSync(protoPath('deviceplugin-v1beta1.proto'), PROTO_LOAD_OPTIONS),
  ).v1beta1 as grpc.GrpcObject;
  return deviceApi;
}

/** The pod-resources v1 package: PodResourcesLister, loaded once. */
export function podResourcesPackage(): grpc.GrpcObject {
  podResourcesApi ??= grpc.loadPackageDefinition(
    protoLoader.loadSync(protoPath('podresources-v1.proto'), PROTO_LOAD_OPTIONS),
  ).v1 as grpc.GrpcObject;
  return podResourcesApi;
}
