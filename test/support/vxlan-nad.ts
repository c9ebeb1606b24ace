/** The CNI config (JSON text) of a vxlan NAD in cluster mode on `vni`, its addresses from cluster IPAM in `subnet`. */
export const clusterVxlanConfig = (name: string, vni: number, subnet: string): string =>
  JSON.stringify({ cniVersion: '1.0.0', name, type: 'vxlan', vni, ipam: { type: 'plexus', ranges: [[{ subnet }]] } });
