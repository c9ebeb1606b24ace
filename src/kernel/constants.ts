/** Linux uapi constants used by the rtnetlink layer (linux/netlink.h, linux/rtnetlink.h, linux/if_link.h, ...). */

export const AF_UNSPEC = 0;
export const AF_INET = 2;
export const AF_BRIDGE = 7;
export const AF_INET6 = 10;
export const AF_NETLINK = 16;

export const SOCK_RAW = 3;
export const SOCK_CLOEXEC = 0o2000000;
export const NETLINK_ROUTE = 0;
export const SOL_NETLINK = 270;
export const NETLINK_CAP_ACK = 10;
export const NETLINK_EXT_ACK = 11;
export const SOL_SOCKET = 1;
export const SO_RCVBUF = 8;

export const CLONE_NEWNET = 0x40000000;
export const IFNAMSIZ = 16;
export const SIOCGIFINDEX = 0x8933;
export const ENODEV = 19;
export const EINVAL = 22;
export const O_RDONLY = 0;
export const O_RDWR = 2;
export const O_CLOEXEC = 0o2000000;

// nlmsghdr types
export const NLMSG_NOOP = 1;
export const NLMSG_ERROR = 2;
export const NLMSG_DONE = 3;
export const RTM_NEWLINK = 16;
export const RTM_DELLINK = 17;
export const RTM_GETLINK = 18;
export const RTM_SETLINK = 19;
export const RTM_NEWADDR = 20;
export const RTM_DELADDR = 21;
export const RTM_GETADDR = 22;
export const RTM_NEWROUTE = 24;
export const RTM_DELROUTE = 25;
export const RTM_GETROUTE = 26;
export const RTM_NEWNEIGH = 28;
export const RTM_DELNEIGH = 29;
export const RTM_GETNEIGH = 30;

// nlmsghdr flags
export const NLM_F_REQUEST = 0x1;
export const NLM_F_MULTI = 0x2;
export const NLM_F_ACK = 0x4;
export const NLM_F_ROOT = 0x100;
export const NLM_F_MATCH = 0x200;
export const NLM_F_DUMP = NLM_F_ROOT | NLM_F_MATCH;
export const NLM_F_REPLACE = 0x100;
export const NLM_F_EXCL = 0x200;
export const NLM_F_CREATE = 0x400;
export const NLM_F_APPEND = 0x800;
export const NLM_F_ACK_TLVS = 0x200;
export const NLMSGERR_ATTR_MSG = 1;
export const NLA_F_NESTED = 0x8000;

// net_device flags
export const IFF_UP = 0x1;
export const IFF_BROADCAST = 0x2;
export const IFF_LOOPBACK = 0x8;
export const IFF_RUNNING = 0x40;
export const IFF_PROMISC = 0x100;
export const IFF_LOWER_UP = 0x10000;

// IFLA_*
export const IFLA_ADDRESS = 1;
export const IFLA_BROADCAST = 2;
export const IFLA_IFNAME = 3;
export const IFLA_MTU = 4;
export const IFLA_LINK = 5;
export const IFLA_MASTER = 10;
export const IFLA_PROTINFO = 12;
export const IFLA_TXQLEN = 13;
export const IFLA_OPERSTATE = 16;
export const IFLA_LINKINFO = 18;
export const IFLA_NET_NS_PID = 19;
export const IFLA_IFALIAS = 20;
export const IFLA_GROUP = 27;
export const IFLA_NET_NS_FD = 28;
export const IFLA_EXT_MASK = 29;
export const IFLA_LINK_NETNSID = 37;
export const IFLA_PERM_ADDRESS = 54;
export const IFLA_PARENT_DEV_NAME = 56;

export const IFLA_INFO_KIND = 1;
export const IFLA_INFO_DATA = 2;
export const VETH_INFO_PEER = 1;
export const IFLA_BRPORT_MODE = 4; // hairpin
export const IFLA_MACVLAN_MODE = 1;
export const IFLA_IPVLAN_MODE = 1;
export const IFLA_VXLAN_ID = 1;
export const IFLA_VXLAN_GROUP = 2;
export const IFLA_VXLAN_LINK = 3;
export const IFLA_VXLAN_LOCAL = 4;
export const IFLA_VXLAN_TTL = 5;
export const IFLA_VXLAN_LEARNING = 7;
export const IFLA_VXLAN_PORT = 15;
export const IFLA_VXLAN_GROUP6 = 16;
export const IFLA_VXLAN_LOCAL6 = 17;
export const IFLA_BR_VLAN_FILTERING = 7;

// IFA_*
export const IFA_ADDRESS = 1;
export const IFA_LOCAL = 2;
export const IFA_LABEL = 3;
export const IFA_BROADCAST = 4;
export const IFA_FLAGS = 8;
export const IFA_F_NODAD = 0x02;
export const IFA_F_DADFAILED = 0x08;
export const IFA_F_TENTATIVE = 0x40;
/** No prefix route for the address's subnet (needs IFA_FLAGS: it does not fit the 8-bit ifa_flags). */
export const IFA_F_NOPREFIXROUTE = 0x200;
export const IFA_F_PERMANENT = 0x80;

// RTA_* / route
export const RTA_DST = 1;
export const RTA_SRC = 2;
export const RTA_OIF = 4;
export const RTA_GATEWAY = 5;
export const RTA_PRIORITY = 6;
export const RTA_PREFSRC = 7;
export const RTA_TABLE = 15;
export const RT_TABLE_MAIN = 254;
export const RTPROT_KERNEL = 2;
export const RTPROT_BOOT = 3;
export const RT_SCOPE_UNIVERSE = 0;
export const RT_SCOPE_LINK = 253;
export const RT_SCOPE_HOST = 254;
/** In a delete: match a route of any scope. */
export const RT_SCOPE_NOWHERE = 255;
export const RTN_UNICAST = 1;

// neighbours (FDB entries for vxlan remote VTEPs)
export const NDA_DST = 1;
export const NDA_LLADDR = 2;
export const NUD_PERMANENT = 0x80;
export const NUD_NOARP = 0x40;
export const NTF_SELF = 0x02;

// tun/tap ioctls (linux/if_tun.h)
export const TUNSETIFF = 0x400454ca;
export const TUNSETPERSIST = 0x400454cb;
export const TUNSETOWNER = 0x400454cc;
export const TUNSETGROUP = 0x400454ce;
export const IFF_TUN = 0x0001;
export const IFF_TAP = 0x0002;
export const IFF_NO_PI = 0x1000;
export const IFF_MULTI_QUEUE = 0x0100;
export const IFF_VNET_HDR = 0x4000;
/** TUNSETIFF fails (EBUSY) when the name exists, rather than attaching to an existing tap of that name. */
export const IFF_TUN_EXCL = 0x8000;
