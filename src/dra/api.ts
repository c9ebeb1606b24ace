/**
 * The kubelet's gRPC APIs a DRA driver speaks: plugin registration v1 (served by the driver on its registration
 * socket) and the DRA plugin service, v1 and v1beta1 (the same messages under two package names; the 1.35 kubelet
 * accepts either and picks the first it knows from supported_versions). The .proto files and the gRPC kit are
 * src/kubelet's.
 */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { PROTO_LOAD_OPTIONS, protoPath } from '../kubelet/grpc';

/** The DRA driver name: ResourceSlices' spec.driver, claims' results[].driver, opaque config's driver. */
export const DRIVER_NAME = 'plexus.io';
/** PluginInfo.type of a DRA driver. */
export const DRA_PLUGIN_TYPE = 'DRAPlugin';
/** What we serve, preferred first: "<last package segment>.<service>", as the kubelet matches them. */
export const SUPPORTED_SERVICES = ['v1.DRAPlugin', 'v1beta1.DRAPlugin'] as const;

export interface PluginInfo {
  type: string;
  name: string;
  endpoint: string;
  supported_versions: string[];
}
export interface RegistrationStatus {
  plugin_registered: boolean;
  error: string;
}

export interface ClaimRef {
  namespace: string;
  uid: string;
  name: string;
}
export interface PreparedDevice {
  request_names: string[];
  pool_name: string;
  device_name: string;
  cdi_device_ids: string[];
}
export interface NodePrepareResourcesRequest {
  claims: ClaimRef[];
}
export interface NodePrepareResourceResponse {
  devices: PreparedDevice[];
  error: string;
}
export interface NodePrepareResourcesResponse {
  claims: Record<string, NodePrepareResourceResponse>;
}
export interface NodeUnprepareResourcesRequest {
  claims: ClaimRef[];
}
export interface NodeUnprepareResourcesResponse {
  claims: Record<string, { error: string }>;
}

export interface DraServices {
  readonly registration: grpc.ServiceDefinition;
  /** The DRAPlugin service by version (v1, v1beta1). */
  readonly draPlugin: Readonly<Record<'v1' | 'v1beta1', grpc.ServiceDefinition>>;
  /** A client of the Registration service (the kubelet's side; tests use it). */
  readonly RegistrationClient: grpc.ServiceClientConstructor;
  readonly DraPluginClient: Readonly<Record<'v1' | 'v1beta1', grpc.ServiceClientConstructor>>;
}

const at = (root: grpc.GrpcObject, path: string): grpc.ServiceClientConstructor => {
  let node: unknown = root;
  for (const part of path.split('.')) node = (node as Record<string, unknown>)[part];
  if (typeof node !== 'function') throw new Error(`${path} is not in the loaded protos`);
  return node as grpc.ServiceClientConstructor;
};

/** Loads the three .proto files (a few milliseconds; done once per driver). */
export function loadDraServices(): DraServices {
  const definition = protoLoader.loadSync(
    ['pluginregistration-v1.proto', 'dra-v1.proto', 'dra-v1beta1.proto'].map(protoPath),
    PROTO_LOAD_OPTIONS,
  );
  const root = grpc.loadPackageDefinition(definition);
  const registration = at(root, 'pluginregistration.Registration');
  const v1 = at(root, 'k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin');
  const v1beta1 = at(root, 'k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin');
  return {
    registration: registration.service,
    draPlugin: { v1: v1.service, v1beta1: v1beta1.service },
    RegistrationClient: registration,
    DraPluginClient: { v1, v1beta1 },
  };
}
