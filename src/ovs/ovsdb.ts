/**
 * A client of the Open vSwitch database (RFC 7047, JSON-RPC over the server's unix socket): `transact` only, which is
 * all Plexus needs to add and remove switch ports. One connection per socket, opened on first use and again after
 * it drops; the server's echo (its keep-alive) is answered. Errors are values that say which switch failed and why.
 */
import { connect, type Socket } from 'node:net';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { ovsErrors } from './errors';
import { JsonStreamSplitter } from './json-stream';

/** An OVSDB operation (RFC 7047 section 5.2), as JSON. */
export type OvsdbOperation = Readonly<Record<string, unknown>>;
/** One operation's outcome: rows for select, count for update/mutate/delete, uuid for insert. */
export interface OvsdbOpResult {
  readonly rows?: readonly Readonly<Record<string, unknown>>[];
  readonly count?: number;
  readonly uuid?: readonly [string, string];
  readonly error?: string;
  readonly details?: string;
}

interface Pending {
  readonly resolve: (r: Result<unknown>) => void;
  readonly timer: NodeJS.Timeout;
}

export const DEFAULT_OVSDB_SOCKET = '/var/run/openvswitch/db.sock';
const DATABASE = 'Open_vSwitch';

export class OvsdbClient {
  private socket: Socket | undefined;
  private connecting: Promise<Result<Socket>> | undefined;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly connectListeners: (() => void)[] = [];
  /** Connections made so far; the first is 1. */
  connections = 0;

  constructor(
    readonly path: string,
    private readonly timeoutMs = 10_000,
  ) {}

  /** Called after every connection is made (the first, and each after a drop: the switch may have lost its ports). */
  onConnect(listener: () => void): void {
    this.connectListeners.push(listener);
  }

  /** Runs one transaction; an operation's error (the whole transaction is then rolled back) is a CniError. */
  async transact(operations: readonly OvsdbOperation[]): Promise<Result<OvsdbOpResult[]>> {
    const r = await this.request('transact', [DATABASE, ...operations]);
    if (!r.ok) return r;
    if (!Array.isArray(r.value))
      return err(this.failure('answered a transaction with something other than a list', JSON.stringify(r.value)));
    const results = r.value as (OvsdbOpResult | null)[];
    const failed = results.find((x) => x?.error !== undefined);
    // RFC 7047: a result list longer than the operations carries a commit error in its last element.
    // The operations go into the error's details, memif secrets (in DPDK device arguments) hidden.
    if (failed)
      return err(
        this.failure(
          `refused the change: ${failed.error}${failed.details ? ` (${failed.details})` : ''}`,
          JSON.stringify(operations).replace(/secret=[^,"]*/g, 'secret=***'),
        ),
      );
    return ok(results.map((x) => x ?? {}));
  }

  close(): void {
    this.socket?.destroy();
    this.socket = undefined;
  }

  private async request(method: string, params: readonly unknown[]): Promise<Result<unknown>> {
    const socket = await this.connected();
    if (!socket.ok) return socket;
    const id = this.nextId++;
    return new Promise<Result<unknown>>((resolve) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        resolve(err(this.failure(`did not answer within ${this.timeoutMs} ms`, method)));
      }, this.timeoutMs);
      this.pending.set(id, { resolve, timer });
      socket.value.write(JSON.stringify({ id, method, params }));
    });
  }

  private connected(): Promise<Result<Socket>> {
    if (this.socket && !this.socket.destroyed) return Promise.resolve(ok(this.socket));
    this.connecting ??= new Promise<Result<Socket>>((resolve) => {
      const socket = connect(this.path);
      const splitter = new JsonStreamSplitter();
      socket.once('connect', () => {
        this.socket = socket;
        this.connecting = undefined;
        this.connections++;
        resolve(ok(socket));
        for (const l of this.connectListeners) l();
      });
      socket.on('data', (chunk: Buffer) => {
        let messages: string[];
        try {
          messages = splitter.push(chunk);
        } catch (e) {
          socket.destroy(e as Error);
          return;
        }
        for (const m of messages) this.receive(socket, m);
      });
      socket.on('error', (e) => {
        if (this.connecting && this.socket !== socket) {
          this.connecting = undefined;
          resolve(err(ovsErrors.unreachable(this.path, e.message)));
        }
      });
      socket.on('close', () => {
        if (this.socket === socket) this.socket = undefined;
        for (const [id, p] of this.pending) {
          clearTimeout(p.timer);
          p.resolve(err(this.failure('closed the connection before answering')));
          this.pending.delete(id);
        }
      });
    });
    return this.connecting;
  }

  private receive(socket: Socket, text: string): void {
    let msg: { id?: unknown; method?: unknown; params?: unknown; result?: unknown; error?: unknown };
    try {
      msg = JSON.parse(text) as typeof msg;
    } catch {
      socket.destroy();
      return;
    }
    if (msg.method === 'echo') {
      socket.write(JSON.stringify({ id: msg.id, result: msg.params ?? [], error: null }));
      return;
    }
    if (typeof msg.id !== 'number') return; // notifications: Plexus does not monitor
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    clearTimeout(p.timer);
    if (msg.error !== null && msg.error !== undefined)
      p.resolve(err(this.failure(`answered with an error: ${JSON.stringify(msg.error)}`)));
    else p.resolve(ok(msg.result));
  }

  private failure(what: string, details = ''): CniError {
    return new CniError(CniCode.TryAgainLater, `the Open vSwitch database at ${this.path} ${what}`, details);
  }
}

/** OVSDB's JSON notation of a map and of a reference to a row inserted in the same transaction. */
export const ovsMap = (entries: Readonly<Record<string, string>>): unknown => ['map', Object.entries(entries)];
export const namedUuid = (name: string): unknown => ['named-uuid', name];
export const ovsSet = (items: readonly unknown[]): unknown => ['set', items];

/** A map column's value (["map", [[k, v], ...]]) as an object. */
export function fromOvsMap(value: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (Array.isArray(value) && value[0] === 'map' && Array.isArray(value[1]))
    for (const pair of value[1] as unknown[])
      if (Array.isArray(pair) && typeof pair[0] === 'string') out[pair[0]] = String(pair[1]);
  return out;
}
