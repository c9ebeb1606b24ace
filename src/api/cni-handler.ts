/** Turns one forwarded CNI call into what plexus-cni prints (stdout bytes) and its exit code. */
import type { Logger } from 'pino';
import { CniError } from '../cni/errors';
import { bestEffortVersion, type ForwardedCall, parseCniRequest } from '../cni/request';
import { convertResult, SUPPORTED_VERSIONS } from '../cni/version';
import { apiErrors } from './errors';
import type { CniVerbs } from './engine-port';

export interface CniReply {
  readonly exitCode: number;
  readonly stdout: string;
}

export const errorReply = (cniVersion: string, e: CniError): CniReply => ({
  exitCode: 1,
  stdout: `${JSON.stringify({ cniVersion, ...e.toJSON() })}\n`,
});

/** What a CNI call is handled with: the engine's verbs, the log, and the signal of the runtime's connection. */
export interface CniCallContext {
  readonly engine: CniVerbs;
  readonly log: Logger;
  /** Aborted when the runtime has given up on the call (its connection closed before the answer). */
  readonly signal?: AbortSignal;
}

export async function handleCniCall(call: ForwardedCall, { engine, log, signal }: CniCallContext): Promise<CniReply> {
  const parsed = parseCniRequest(call);
  if (!parsed.ok) {
    log.warn(
      {
        command: call.env.CNI_COMMAND,
        containerId: call.env.CNI_CONTAINERID,
        code: parsed.error.code,
        msg: parsed.error.message,
      },
      'rejected CNI call',
    );
    return errorReply(bestEffortVersion(call.stdin), parsed.error);
  }
  const req = parsed.value;
  // Every line about a sandbox names its container, interface and pod (namespace/name, when the runtime gave them).
  const sandbox =
    'containerId' in req
      ? {
          containerId: req.containerId,
          ifname: req.ifname,
          ...(req.args.podName ? { pod: `${req.args.podNamespace ?? 'default'}/${req.args.podName}` } : {}),
        }
      : {};
  const fail = (e: CniError): CniReply => {
    log.warn({ command: req.command, ...sandbox, code: e.code, msg: e.message, details: e.details }, 'CNI call failed');
    return errorReply(req.version, e);
  };
  switch (req.command) {
    case 'VERSION':
      return {
        exitCode: 0,
        stdout: `${JSON.stringify({ cniVersion: req.version, supportedVersions: SUPPORTED_VERSIONS })}\n`,
      };
    case 'STATUS': {
      const r = await engine.status(req);
      return r.ok ? { exitCode: 0, stdout: '' } : fail(r.error);
    }
    case 'ADD': {
      const r = await engine.add(req, signal);
      if (!r.ok) return fail(r.error);
      log.info(
        {
          ...sandbox,
          interfaces: r.value.interfaces.filter((i) => i.sandbox).map((i) => i.name),
          ips: r.value.ips.map((i) => i.address),
        },
        'ADD',
      );
      return { exitCode: 0, stdout: `${JSON.stringify(convertResult(r.value, req.version))}\n` };
    }
    case 'DEL': {
      const r = await engine.del(req);
      if (!r.ok) return fail(r.error);
      log.info(sandbox, 'DEL');
      return { exitCode: 0, stdout: '' };
    }
    case 'CHECK': {
      const r = await engine.check(req);
      return r.ok ? { exitCode: 0, stdout: '' } : fail(r.error);
    }
    case 'GC': {
      const r = await engine.gc(req);
      return r.ok ? { exitCode: 0, stdout: '' } : fail(r.error);
    }
  }
}

export const internalErrorReply = (stdin: string, e: unknown): CniReply =>
  errorReply(bestEffortVersion(stdin), e instanceof CniError ? e : apiErrors.internal(e));
