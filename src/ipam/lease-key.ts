/**
 * Who holds a lease: the container and the *lease interface*, which names the whole attachment, the runtime's
 * interface (CNI_IFNAME) and the pod's: `eth0:net1`. No interface name contains ':', so the text is unambiguous and
 * never equals the bare pod interface (`net1`) that leases and journal steps written before it carry; those keep
 * being released by the steps that name them. docs/ipam.md, "Who owns a lease".
 */
export const leaseInterface = (runtimeIfname: string, podIfname: string): string => `${runtimeIfname}:${podIfname}`;
