/**
 * What every real node of the tests shares, whichever fixture runs it (the test cluster of ./cluster, one node or
 * many): the pause image's name, whether a kubelet and containerd can run here, the kubelet's verbosity, the kernel
 * settings a kubelet changes, a minimal CRI client (Debian has no crictl) and the conflist that makes plexus-cni a
 * runtime's only plugin.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { connect as http2Connect, constants as http2Constants } from 'node:http2';
import { connect as netConnect } from 'node:net';
import { delimiter, join } from 'node:path';
import { containerdMissing } from './containerd';
import { k8sBinaryMissing, k8sMissing } from './k8s';

export const PAUSE_IMAGE = 'local.test/pause:1';

const which = (name: string): string | undefined =>
  [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/sbin']
    .map((d) => join(d, name))
    .find((p) => existsSync(p));

/** Why a real node cannot run here, or undefined when it can. */
export function kubeNodeMissing(): string | undefined {
  if (process.getuid?.() !== 0) return 'a kubelet and containerd need root';
  const api = k8sMissing();
  if (api) return api;
  const runtime = containerdMissing();
  if (runtime) return runtime;
  if (!which('ip')) return 'not installed: iproute2 (ip)';
  return k8sBinaryMissing('kubelet');
}

/**
 * Debugging a node: PLEXUS_KUBELET_VERBOSITY=N runs the kubelet at --v=N (its pod workers' steps show from 4);
 * PLEXUS_CLUSTER_LOGS=DIR keeps the nodes' logs (cluster.ts).
 */
export function kubeletVerbosity(): string[] {
  const v = process.env.PLEXUS_KUBELET_VERBOSITY;
  if (v === undefined || v === '') return [];
  if (!/^\d$/.test(v)) throw new Error(`PLEXUS_KUBELET_VERBOSITY is a level from 0 to 9, not ${JSON.stringify(v)}`);
  return [`--v=${v}`];
}

export interface Sandbox {
  readonly id: string;
  readonly name: string;
  readonly namespace: string;
  readonly uid: string;
  readonly ready: boolean;
}

/** Kernel settings the kubelet changes at start (vm.overcommit_memory, kernel.panic, ...): read before, written back after. */
export class KernelSettings {
  private readonly before = new Map<string, string>();

  constructor(private readonly keys: readonly string[]) {}

  record(): void {
    for (const k of this.keys) {
      try {
        this.before.set(k, readFileSync(`/proc/sys/${k}`, 'utf8'));
      } catch {
        /* not on this kernel */
      }
    }
  }

  restore(): void {
    for (const [k, v] of this.before)
      if (readFileSync(`/proc/sys/${k}`, 'utf8') !== v) writeFileSync(`/proc/sys/${k}`, v);
    this.before.clear();
  }
}

// -- a minimal CRI client -----------------------------------------------------------------------------------------------
// Debian has no crictl; tear-down needs ListPodSandbox, StopPodSandbox and RemovePodSandbox (these run CNI DEL), and the
// verification a pod's netns path (PodSandboxStatus, verbose). gRPC is HTTP/2 with length-prefixed protobuf messages;
// the few fields used are encoded and decoded by hand.

const varint = (n: number): Buffer => {
  const bytes: number[] = [];
  do {
    bytes.push((n & 0x7f) | (n > 0x7f ? 0x80 : 0));
    n = Math.floor(n / 128);
  } while (n > 0);
  return Buffer.from(bytes);
};
const stringField = (no: number, s: string): Buffer =>
  Buffer.concat([varint((no << 3) | 2), varint(Buffer.byteLength(s)), Buffer.from(s)]);
const varintField = (no: number, v: number): Buffer => Buffer.concat([varint(no << 3), varint(v)]);

/** The fields of one protobuf message: number -> values (Buffers for length-delimited, numbers for varints). */
function decode(buf: Buffer): Map<number, (Buffer | number)[]> {
  const fields = new Map<number, (Buffer | number)[]>();
  let i = 0;
  const readVarint = (): number => {
    let result = 0;
    let mul = 1;
    for (;;) {
      const b = buf[i++]!;
      result += (b & 0x7f) * mul;
      if (b < 0x80) return result;
      mul *= 128;
    }
  };
  while (i < buf.length) {
    const tag = readVarint();
    const no = Math.floor(tag / 8);
    let value: Buffer | number;
    switch (tag & 7) {
      case 0:
        value = readVarint();
        break;
      case 1:
        value = buf.subarray(i, i + 8);
        i += 8;
        break;
      case 2: {
        const len = readVarint();
        value = buf.subarray(i, i + len);
        i += len;
        break;
      }
      case 5:
        value = buf.subarray(i, i + 4);
        i += 4;
        break;
      default:
        throw new Error(`CRI: unsupported protobuf wire type ${tag & 7}`);
    }
    fields.set(no, [...(fields.get(no) ?? []), value]);
  }
  return fields;
}
const str = (f: Map<number, (Buffer | number)[]>, no: number): string => {
  const v = f.get(no)?.[0];
  return Buffer.isBuffer(v) ? v.toString('utf8') : '';
};

export class CriRuntime {
  constructor(private readonly socket: string) {}

  private call(method: string, request: Buffer, timeoutMs = 120000): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const session = http2Connect('http://localhost', { createConnection: () => netConnect(this.socket) });
      const fail = (e: Error): void => {
        session.destroy();
        reject(e);
      };
      session.on('error', fail);
      const req = session.request({
        ':method': 'POST',
        ':path': `/runtime.v1.RuntimeService/${method}`,
        'content-type': 'application/grpc',
        te: 'trailers',
      });
      req.setTimeout(timeoutMs, () => {
        req.close(http2Constants.NGHTTP2_CANCEL);
        fail(new Error(`CRI ${method}: no answer in ${timeoutMs} ms`));
      });
      let status: string | undefined;
      let detail = '';
      const note = (h: Record<string, unknown>): void => {
        const code = h['grpc-status'];
        if (typeof code === 'string' || typeof code === 'number') status = String(code);
        const text = h['grpc-message'];
        if (typeof text === 'string') detail = decodeURIComponent(text);
      };
      req.on('response', note);
      req.on('trailers', note);
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('error', fail);
      req.on('end', () => {
        session.close();
        if (status !== '0') return reject(new Error(`CRI ${method}: grpc-status ${status ?? '?'} ${detail}`));
        const all = Buffer.concat(chunks);
        resolve(all.length >= 5 ? all.subarray(5, 5 + all.readUInt32BE(1)) : Buffer.alloc(0));
      });
      const frame = Buffer.alloc(5 + request.length);
      frame.writeUInt32BE(request.length, 1);
      request.copy(frame, 5);
      req.end(frame);
    });
  }

  async listSandboxes(): Promise<Sandbox[]> {
    const reply = decode(await this.call('ListPodSandbox', Buffer.alloc(0)));
    return (reply.get(1) ?? [])
      .filter((b) => Buffer.isBuffer(b))
      .map((item) => {
        const s = decode(item);
        const meta = decode((s.get(2)?.[0] as Buffer | undefined) ?? Buffer.alloc(0));
        // state: SANDBOX_READY = 0 (proto3 leaves it out), SANDBOX_NOTREADY = 1
        return {
          id: str(s, 1),
          name: str(meta, 1),
          uid: str(meta, 2),
          namespace: str(meta, 3),
          ready: ((s.get(3)?.[0] as number | undefined) ?? 0) === 0,
        };
      });
  }

  async stopSandbox(id: string): Promise<void> {
    await this.call('StopPodSandbox', stringField(1, id));
  }

  async removeSandbox(id: string): Promise<void> {
    await this.call('RemovePodSandbox', stringField(1, id));
  }

  /**
   * The runtime's conditions (CRI Status): RuntimeReady and NetworkReady, each with its reason and message (the CNI
   * plugin's STATUS error, or "cni config uninitialized", while the network is not ready).
   */
  async conditions(): Promise<{ type: string; status: boolean; reason: string; message: string }[]> {
    const reply = decode(await this.call('Status', Buffer.alloc(0)));
    const runtimeStatus = decode((reply.get(1)?.[0] as Buffer | undefined) ?? Buffer.alloc(0));
    return (runtimeStatus.get(1) ?? [])
      .filter((b) => Buffer.isBuffer(b))
      .map((item) => {
        const c = decode(item);
        return { type: str(c, 1), status: c.get(2)?.[0] === 1, reason: str(c, 3), message: str(c, 4) };
      });
  }

  async netnsPath(id: string): Promise<string> {
    const reply = decode(await this.call('PodSandboxStatus', Buffer.concat([stringField(1, id), varintField(2, 1)])));
    for (const entry of (reply.get(2) ?? []).filter((b) => Buffer.isBuffer(b))) {
      const kv = decode(entry);
      if (str(kv, 1) !== 'info') continue;
      const info = JSON.parse(str(kv, 2)) as {
        runtimeSpec?: { linux?: { namespaces?: { type: string; path?: string }[] } };
      };
      const path = info.runtimeSpec?.linux?.namespaces?.find((n) => n.type === 'network')?.path;
      if (path) return path;
    }
    throw new Error(`sandbox ${id}: no network namespace in its verbose status`);
  }
}

/**
 * The node's CNI config: plexus-cni alone, forwarding to `socket`, with the pod's annotations (as containerd sends).
 * 1.0.0 by default, the version every runtime reads; with 1.1.0 containerd 2 also asks it STATUS for the node's
 * network readiness.
 */
export const plexusConflist = (socket: string, cniVersion = '1.0.0'): string =>
  JSON.stringify({
    cniVersion,
    name: 'plexus',
    plugins: [{ type: 'plexus-cni', socketPath: socket, capabilities: { 'io.kubernetes.cri.pod-annotations': true } }],
  });
