/**
 * Plugin-specific CNI error codes (>= 100) for IPAM. Configuration errors use the spec's
 * CniCode.InvalidNetworkConfig (7) and disk failures CniCode.IoFailure (5).
 */

/** A requested address is held by another lease. */
export const IPAM_ADDRESS_IN_USE = 101;
/** Every allocatable address of a range set is leased. */
export const IPAM_POOL_EXHAUSTED = 102;
