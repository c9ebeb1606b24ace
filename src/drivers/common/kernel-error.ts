/**
 * Where a kernel failure becomes a CNI error: code 100 (the kernel refused what a valid config asked for), the
 * kernel's words in the message, errno and extended ack in details, and the context it happened in.
 */
import { CniCode, CniError } from '../../cni/errors';
import type { KernelCallError } from '../../kernel/kernel';

export const kernelError = (e: KernelCallError, context?: string): CniError =>
  new CniError(CniCode.Internal, context ? `${context}: ${e.message}` : e.message, e.details);
