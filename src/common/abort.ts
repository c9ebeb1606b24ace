/** Why a call was given up on, as a person reads it: the reason its AbortSignal was aborted with. */
export function abortReason(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  if (typeof reason === 'string') return reason;
  return reason instanceof Error ? reason.message : 'the call was abandoned';
}
