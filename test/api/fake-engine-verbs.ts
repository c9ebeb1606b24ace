/**
 * A fake of the socket API's one port (src/api/engine-port.ts), made for test/api: it keeps every call it gets, in
 * order, and answers what the test set (by default: success with an empty result, no records, no networks).
 */
import type { CniResult } from '../../src/cni/types';
import { type CniError, ok, type Result } from '../../src/cni/errors';
import type { EngineVerbs } from '../../src/api/engine-port';
import type { ContainerRequest } from '../../src/engine/context';
import type { SweepReport } from '../../src/engine/engine';
import type { AttachmentRecord } from '../../src/engine/journal';

type Verb = 'add' | 'del' | 'check' | 'gc' | 'status';

/** One call the fake got: the verb and the request the API parsed for it. */
export interface VerbCall {
  readonly verb: Verb | 'sweep';
  readonly request: unknown;
}

export const EMPTY_RESULT: CniResult = { interfaces: [], ips: [], routes: [] };

export class FakeEngineVerbs implements EngineVerbs {
  readonly calls: VerbCall[] = [];
  /** What ADD answers (a result, or a CNI error). */
  addAnswer: Result<CniResult> = ok(EMPTY_RESULT);
  /** What DEL, CHECK, GC and STATUS answer. */
  otherAnswer: Result<void> = ok(undefined);
  /** Thrown by every verb instead of answering, when set: a defect in the engine. */
  throws: Error | undefined;
  /** Held until released, when set: each verb waits on it (to fill the API's call slots). */
  gate: Promise<void> | undefined;
  /** The signal each ADD was handed (aborted when the runtime's connection closed before the answer). */
  readonly addSignals: (AbortSignal | undefined)[] = [];
  attachmentRecords: AttachmentRecord[] = [];
  networkErrors: CniError[] = [];

  private async answer<T>(verb: Verb, request: unknown, answer: T): Promise<T> {
    this.calls.push({ verb, request });
    await this.gate;
    if (this.throws) throw this.throws;
    return answer;
  }

  add(req: ContainerRequest, signal?: AbortSignal): Promise<Result<CniResult>> {
    this.addSignals.push(signal);
    return this.answer('add', req, this.addAnswer);
  }
  del(req: ContainerRequest): Promise<Result<void>> {
    return this.answer('del', req, this.otherAnswer);
  }
  check(req: ContainerRequest): Promise<Result<void>> {
    return this.answer('check', req, this.otherAnswer);
  }
  gc(req: Parameters<EngineVerbs['gc']>[0]): Promise<Result<void>> {
    return this.answer('gc', req, this.otherAnswer);
  }
  status(req: Parameters<EngineVerbs['status']>[0]): Promise<Result<void>> {
    return this.answer('status', req, this.otherAnswer);
  }
  records(): Promise<AttachmentRecord[]> {
    return Promise.resolve(this.attachmentRecords);
  }
  adopted(): ReturnType<EngineVerbs['adopted']> {
    return [];
  }
  listNetworks(): ReturnType<EngineVerbs['listNetworks']> {
    return { networks: [], errors: this.networkErrors };
  }
  sweep(...[, { dryRun }]: Parameters<EngineVerbs['sweep']>): Promise<SweepReport> {
    this.calls.push({ verb: 'sweep', request: { dryRun } });
    return Promise.resolve({ removed: [], kept: 0, failures: [], leases: [], leasesReleased: 0, dryRun });
  }
}
