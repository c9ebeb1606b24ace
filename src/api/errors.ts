/** The errors the socket API answers before a call reaches the engine: too large, not text, malformed, busy. */
import { CniCode, CniError } from '../cni/errors';

export const apiErrors = {
  tooLarge: (what: 'CNI request' | 'GC request', maxBytes: number): CniError =>
    new CniError(CniCode.InvalidNetworkConfig, `${what} larger than ${maxBytes} bytes`),
  notUtf8: (): CniError =>
    new CniError(
      CniCode.InvalidEnvironment,
      'the CNI environment or network configuration is not valid UTF-8',
      'CNI_IFNAME, CNI_CONTAINERID, CNI_ARGS and the config on stdin must be text',
    ),
  malformed: (why: string): CniError => new CniError(CniCode.DecodeFailure, 'malformed request from plexus-cni', why),
  busy: (inFlight: number, queued: number): CniError =>
    new CniError(CniCode.TryAgainLater, `plexusd is busy (${inFlight} calls running, ${queued} queued)`, 'retry later'),
  /** Something thrown that is not a CNI error: a defect, answered as an error (code 100) rather than a dropped connection. */
  internal: (thrown: unknown): CniError =>
    new CniError(CniCode.Internal, `plexusd failed: ${(thrown as Error)?.message ?? String(thrown)}`),
};
