/**
 * What the device plugin (src/deviceplugin) and the DRA driver (src/dra) share to speak the kubelet's gRPC APIs: the
 * .proto files (src/kubelet/proto: device plugin v1beta1, pod-resources v1, plugin registration v1, DRA v1 and
 * v1beta1), the options they are loaded with, unary calls and unix-socket targets, and the shutdown of a kubelet-facing
 * server. The build does not copy the .proto files, so they are looked up in the source tree from dist as well.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type * as protoLoader from '@grpc/proto-loader';

/** Messages as in the .proto (keepCase), 64-bit numbers and enums as strings, defaults filled in on decode. */
export const PROTO_LOAD_OPTIONS: protoLoader.Options = {
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
    join(__dirname, '..', '..', '..', 'src', 'kubelet', 'proto', file),
  ];
  const found = candidates.find((p) => existsSync(p));
  if (!found)
    throw new Error(
      `${file} not found (looked in ${candidates.join(', ')}): it ships with Plexus in src/kubelet/proto`,
    );
  return found;
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
