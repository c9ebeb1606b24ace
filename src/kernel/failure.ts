/**
 * The one error of the kernel layer: a failed kernel call, carrying the failure as the kernel reported it. The worker
 * throws it while it runs a batch and sends its `failure` (plain data) back; the daemon side rebuilds it with the
 * index of the operation that failed. CNI codes are the drivers' business (drivers/common/kernel-error.ts).
 */
import * as C from './constants';
import { errnoName } from './syscalls';
import type { KernelFailure } from './types';

export class KernelCallError extends Error {
  /** errno and extended ack, for a CNI error's details. */
  readonly details: string;

  /** `index`: the failed operation's place in its batch (0 outside a batch). */
  constructor(
    readonly failure: KernelFailure,
    readonly index = 0,
  ) {
    super(describeFailure(failure));
    this.name = 'KernelCallError';
    const extack = failure.extack ? ` extack="${failure.extack}"` : '';
    this.details = `errno=${failure.errno} ${failure.errnoName}${extack}`;
  }

  is(errnoName: string): boolean {
    return this.failure.errnoName === errnoName;
  }
}

function describeFailure(f: KernelFailure): string {
  const target = f.target ? ` ${f.target}` : '';
  const extack = f.extack ? ` - kernel says: ${f.extack}` : '';
  return `${f.op}${target} failed: ${f.errnoName} (${f.message})${extack}`;
}

const ERRNO_TEXTS: Readonly<Record<string, string>> = {
  EEXIST: 'already exists',
  ENODEV: 'no such device',
  ENOENT: 'no such file or directory',
  EINVAL: 'invalid argument',
  EPERM: 'operation not permitted',
  EBUSY: 'device or resource busy',
  EOPNOTSUPP: 'operation not supported',
  EADDRNOTAVAIL: 'address not available',
  ENETUNREACH: 'network unreachable',
  ESRCH: 'no such process',
  ENOBUFS: 'no buffer space',
  EAFNOSUPPORT: 'address family not supported',
  ERANGE: 'out of range',
  EACCES: 'permission denied',
};

const strerror = (n: number): string => ERRNO_TEXTS[errnoName(n)] ?? `errno ${n}`;

export function failure(op: string, target: string, errno: number, extack?: string): KernelFailure {
  const f = { op, target, errno, errnoName: errnoName(errno), message: strerror(errno) };
  return extack ? { ...f, extack } : f;
}

/** The error to throw for a failed call: `callFailed('setns', path, sys.errno())`. */
export const callFailed = (op: string, target: string, errno: number, extack?: string): KernelCallError =>
  new KernelCallError(failure(op, target, errno, extack));

/** EINVAL with the reason in the extended-ack slot: for a request the kernel would refuse, refused before sending. */
export const invalidRequest = (op: string, target: string, why: string): KernelCallError =>
  callFailed(op, target, C.EINVAL, why);
