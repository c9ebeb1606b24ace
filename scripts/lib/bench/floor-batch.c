/*
 * The rtnetlink batch of a 1-interface bridge ADD in C (floor.ts builds it with musl-gcc -static and runs it beside
 * floor-batch.ts, the same batch through src/kernel): the same requests, with nothing between them but the kernel.
 *
 *   floor-batch RUNS WARMUP PREFIX BRIDGE NET CHURN      (NET: "10.<n>"; CHURN: 0 or 1)
 *
 * Prints {"samples":[ms,...]} (one per measured run). Namespaces are PREFIX<i>, host veths PREFIX v<i>.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct msg {
    struct nlmsghdr *h;
    char buf[4096];
};

static unsigned seq = 1;

static void *msg_init(struct msg *m, unsigned short type, unsigned short flags, size_t header)
{
    memset(m->buf, 0, sizeof m->buf);
    m->h = (struct nlmsghdr *)m->buf;
    m->h->nlmsg_type = type;
    m->h->nlmsg_flags = (unsigned short)(flags | NLM_F_REQUEST | NLM_F_ACK);
    m->h->nlmsg_seq = seq++;
    m->h->nlmsg_len = (unsigned)NLMSG_LENGTH(header);
    return NLMSG_DATA(m->h);
}

static struct rtattr *attr(struct msg *m, unsigned short type, const void *data, size_t len)
{
    struct rtattr *a = (struct rtattr *)(m->buf + NLMSG_ALIGN(m->h->nlmsg_len));
    a->rta_type = type;
    a->rta_len = (unsigned short)RTA_LENGTH(len);
    if (data)
        memcpy(RTA_DATA(a), data, len);
    m->h->nlmsg_len = (unsigned)(NLMSG_ALIGN(m->h->nlmsg_len) + RTA_ALIGN(a->rta_len));
    return a;
}

static void nest_end(struct msg *m, struct rtattr *a)
{
    a->rta_len = (unsigned short)(m->buf + m->h->nlmsg_len - (char *)a);
}

static int nl_open(void)
{
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        perror("netlink socket");
        exit(1);
    }
    return fd;
}

/* Sends the request and reads until its ack; dies on an error (the bench's batch has none to tolerate). */
static void talk(int fd, struct msg *m, const char *what)
{
    static char reply[65536];
    if (send(fd, m->buf, m->h->nlmsg_len, 0) < 0) {
        perror(what);
        exit(1);
    }
    for (;;) {
        ssize_t n = recv(fd, reply, sizeof reply, 0);
        if (n < 0) {
            perror(what);
            exit(1);
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)reply; NLMSG_OK(h, (unsigned)n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_seq != m->h->nlmsg_seq || h->nlmsg_type != NLMSG_ERROR)
                continue;
            int code = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
            if (code) {
                fprintf(stderr, "%s: %s\n", what, strerror(-code));
                exit(1);
            }
            return;
        }
    }
}

static int ifindex(int fd, const char *name)
{
    struct ifreq r;
    memset(&r, 0, sizeof r);
    strncpy(r.ifr_name, name, IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFINDEX, &r) < 0) {
        perror(name);
        exit(1);
    }
    return r.ifr_ifindex;
}

static void veth(int host, const char *name, const char *bridge, int nsfd)
{
    struct msg m;
    struct ifinfomsg *ifi = msg_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, sizeof *ifi);
    ifi->ifi_flags = IFF_UP;
    ifi->ifi_change = IFF_UP;
    attr(&m, IFLA_IFNAME, name, strlen(name) + 1);
    unsigned char mac[6] = {0x02};
    for (int k = 1; k < 6; k++)
        mac[k] = (unsigned char)rand();
    attr(&m, IFLA_ADDRESS, mac, sizeof mac);
    unsigned master = (unsigned)ifindex(host, bridge);
    attr(&m, IFLA_MASTER, &master, sizeof master);
    struct rtattr *info = attr(&m, IFLA_LINKINFO, NULL, 0);
    attr(&m, IFLA_INFO_KIND, "veth", 5);
    struct rtattr *data = attr(&m, IFLA_INFO_DATA, NULL, 0);
    struct rtattr *peer = attr(&m, VETH_INFO_PEER, NULL, sizeof(struct ifinfomsg));
    m.h->nlmsg_len = (unsigned)(NLMSG_ALIGN(m.h->nlmsg_len));
    attr(&m, IFLA_IFNAME, "eth0", 5);
    attr(&m, IFLA_NET_NS_FD, &nsfd, sizeof nsfd);
    nest_end(&m, peer);
    nest_end(&m, data);
    nest_end(&m, info);
    talk(host, &m, "veth");
}

static void configure(int pod, const char *net, int i)
{
    struct msg m;
    int index = ifindex(pod, "eth0");
    struct ifinfomsg *ifi = msg_init(&m, RTM_NEWLINK, 0, sizeof *ifi);
    ifi->ifi_index = index;
    ifi->ifi_flags = IFF_UP;
    ifi->ifi_change = IFF_UP;
    talk(pod, &m, "eth0 up");

    char text[32];
    struct in_addr local, bcast, gw;
    snprintf(text, sizeof text, "%s.%d.%d", net, 1 + i / 250, 2 + i % 250);
    inet_pton(AF_INET, text, &local);
    bcast.s_addr = local.s_addr | htonl(0xffff);
    snprintf(text, sizeof text, "%s.0.1", net);
    inet_pton(AF_INET, text, &gw);
    struct ifaddrmsg *ifa = msg_init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, sizeof *ifa);
    ifa->ifa_family = AF_INET;
    ifa->ifa_prefixlen = 16;
    ifa->ifa_flags = IFA_F_NODAD;
    ifa->ifa_index = (unsigned)index;
    attr(&m, IFA_LOCAL, &local, 4);
    attr(&m, IFA_ADDRESS, &local, 4);
    attr(&m, IFA_BROADCAST, &bcast, 4);
    talk(pod, &m, "address");

    struct rtmsg *rt = msg_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, sizeof *rt);
    rt->rtm_family = AF_INET;
    rt->rtm_table = RT_TABLE_MAIN;
    rt->rtm_protocol = RTPROT_BOOT;
    rt->rtm_scope = RT_SCOPE_UNIVERSE;
    rt->rtm_type = RTN_UNICAST;
    attr(&m, RTA_GATEWAY, &gw, 4);
    attr(&m, RTA_OIF, &index, sizeof index);
    talk(pod, &m, "route");

    ifi = msg_init(&m, RTM_GETLINK, 0, sizeof *ifi);
    ifi->ifi_index = index;
    talk(pod, &m, "eth0 read back");
}

static void del_link(int host, const char *name)
{
    struct msg m;
    msg_init(&m, RTM_DELLINK, 0, sizeof(struct ifinfomsg));
    attr(&m, IFLA_IFNAME, name, strlen(name) + 1);
    talk(host, &m, "delete veth");
}

static void ip_netns(const char *verb, const char *name)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ip netns %s %s", verb, name);
    if (system(cmd) != 0) {
        fprintf(stderr, "%s failed\n", cmd);
        exit(1);
    }
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: floor-batch RUNS WARMUP PREFIX BRIDGE NET CHURN\n");
        return 2;
    }
    int runs = atoi(argv[1]), warmup = atoi(argv[2]), churn = atoi(argv[6]);
    const char *prefix = argv[3], *bridge = argv[4], *net = argv[5];
    int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int host = nl_open();
    char name[64], path[128], vname[64];
    if (!churn)
        for (int i = 0; i < warmup + runs; i++) {
            snprintf(name, sizeof name, "%s%d", prefix, i);
            ip_netns("add", name);
        }
    printf("{\"samples\":[");
    for (int i = 0; i < warmup + runs; i++) {
        snprintf(name, sizeof name, "%s%d", prefix, i);
        snprintf(path, sizeof path, "/var/run/netns/%s", name);
        snprintf(vname, sizeof vname, "%sv%d", prefix, i);
        if (churn)
            ip_netns("add", name);
        double t0 = now_ms();
        int nsfd = open(path, O_RDONLY | O_CLOEXEC);
        veth(host, vname, bridge, nsfd);
        if (setns(nsfd, CLONE_NEWNET) < 0) {
            perror("setns");
            return 1;
        }
        int pod = nl_open();
        if (setns(home, CLONE_NEWNET) < 0) {
            perror("setns home");
            return 1;
        }
        close(nsfd);
        configure(pod, net, i);
        close(pod);
        double ms = now_ms() - t0;
        if (i >= warmup)
            printf("%s%.6f", i > warmup ? "," : "", ms);
        del_link(host, vname);
        if (churn)
            ip_netns("del", name);
    }
    printf("]}\n");
    if (!churn)
        for (int i = 0; i < warmup + runs; i++) {
            snprintf(name, sizeof name, "%s%d", prefix, i);
            ip_netns("del", name);
        }
    return 0;
}
