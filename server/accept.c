/* Who may connect (skv_server.h): the listening socket, accepting a
 * connection and tying it to a tenant by its peer credentials, AUTH, and
 * the limits on connections that have not authenticated yet. Loop thread
 * only. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sodium.h>

#include "server_int.h"

/* ------------------------------------------------------------------------
 * Tenants
 * ---------------------------------------------------------------------- */
static int uid_is_admin(const skv_server *s, uint32_t uid)
{
    for (size_t i = 0; i < s->cfg.nadmin_uids; i++)
        if (s->cfg.admin_uids[i] == uid)
            return 1;
    return 0;
}

/* The tenant of a peer by its credentials, or -1. */
static int tenant_of_peer(const skv_server *s, uint32_t uid, uint32_t gid)
{
    for (size_t i = 0; i < s->cfg.nrules; i++)
        if (s->cfg.rules[i].kind == SKV_RULE_UID && s->cfg.rules[i].id == uid)
            return s->cfg.rules[i].tenant;
    for (size_t i = 0; i < s->cfg.nrules; i++)
        if (s->cfg.rules[i].kind == SKV_RULE_GID && s->cfg.rules[i].id == gid)
            return s->cfg.rules[i].tenant;
    return -1;
}

int srv_auth(skv_server *s, srv_client *c, const uint8_t *user, size_t ulen,
             const uint8_t *tok, size_t tlen)
{
    /* Hash to a fixed length so the comparison's time depends on neither
     * the token's length nor its bytes, and compare against every tenant
     * (no early exit) so the time does not say which one matched. */
    uint8_t h[32];
    crypto_generichash(h, sizeof h, tok, tlen, NULL, 0);
    int found = -1;
    for (size_t i = 0; i < s->cfg.ntenants; i++) {
        const skv_server_tenant *t = &s->cfg.tenants[i];
        int eq = sodium_memcmp(h, t->token_hash, sizeof h) == 0;
        int name_ok = !user || (ulen == strlen(t->name) && memcmp(user, t->name, ulen) == 0);
        if (eq && t->has_token && name_ok && found < 0)
            found = (int)i;
    }
    sodium_memzero(h, sizeof h);
    if (found < 0) {
        c->auth_fails++;
        pthread_mutex_lock(&s->smu);
        s->auth_failures++;
        pthread_mutex_unlock(&s->smu);
        return -1;
    }
    if (found != c->tenant && srv_tenant_full(s, found))
        return -2;
    srv_set_tenant(s, c, found);
    c->admin = s->cfg.tenants[found].admin || uid_is_admin(s, c->uid);
    return 0;
}

/* ------------------------------------------------------------------------
 * Accepting
 * ---------------------------------------------------------------------- */
static void refuse(int fd, const char *msg)
{
    ssize_t w = send(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    close(fd);
}

/* Connections not yet tied to a tenant have max-unauth-clients slots of
 * their own: a new one takes the slot of the one that has waited longest
 * (a client that means it sends AUTH at once), so idle ones cannot keep
 * others out, and they can never fill the tenants' slots. 1 when one was
 * closed. */
static int evict_unauth(skv_server *s)
{
    srv_client *old = NULL;
    for (srv_client *c = s->clients; c; c = c->next)
        if (c->tenant < 0 && c->fd >= 0 && !c->busy && (!old || c->since < old->since))
            old = c;
    if (!old)
        return 0;
    refuse(dup(old->fd), "-ERR closed: too many connections waiting to authenticate\r\n");
    srv_client_free(s, old);
    return 1;
}

void srv_accept(skv_server *s, int lfd, int tcp)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return; /* EAGAIN, or out of descriptors: retried on the next event */
        }
        /* a TCP peer has no kernel identity: it is nobody until it AUTHs */
        struct ucred cr = {.pid = 0, .uid = SRV_NO_UID, .gid = SRV_NO_UID};
        socklen_t cl = sizeof cr;
        if (tcp) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        } else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0) {
            close(fd);
            continue;
        }
        if (s->nclients >= s->cfg.max_clients) {
            s->rejected++;
            refuse(fd, "-ERR max number of clients reached\r\n");
            continue;
        }
        int t = tcp ? -1 : tenant_of_peer(s, cr.uid, cr.gid);
        if (t < 0 && s->have_tokens && s->nunauth >= s->cfg.max_unauth && !evict_unauth(s)) {
            s->rejected++;
            refuse(fd, "-BUSY too many connections waiting to authenticate (max-unauth-clients)\r\n");
            continue;
        }
        if (t >= 0 && srv_tenant_full(s, t)) {
            s->rejected++;
            char msg[160];
            snprintf(msg, sizeof msg, "-BUSY tenant %s has all the connections its max-clients allows\r\n",
                     s->cfg.tenants[t].name);
            refuse(fd, msg);
            continue;
        }
        if (t < 0 && !s->have_tokens) {
            s->rejected++;
            char msg[128];
            snprintf(msg, sizeof msg, "-ERR peer uid %u gid %u is not a tenant of this server\r\n",
                     (unsigned)cr.uid, (unsigned)cr.gid);
            srv_log(s, "refused a peer with uid %u gid %u pid %d: no tenant", (unsigned)cr.uid,
                    (unsigned)cr.gid, (int)cr.pid);
            refuse(fd, msg);
            continue;
        }
        srv_client *c = skv_calloc(1, sizeof *c);
        uint8_t *in = skv_malloc(RBUF_CAP);
        if (!c || !in) {
            skv_free(c);
            skv_free(in);
            refuse(fd, "-ERR out of memory\r\n");
            continue;
        }
        c->fd = fd;
        c->in = in;
        c->id = ++s->next_id;
        c->uid = cr.uid;
        c->gid = cr.gid;
        c->pid = cr.pid;
        c->tenant = -1;
        c->tcp = tcp;
        s->nunauth++;
        srv_set_tenant(s, c, t);
        c->since = srv_now();
        c->admin = (t >= 0 && s->cfg.tenants[t].admin) || uid_is_admin(s, cr.uid);
        c->proto = 2;
        skv_resp_limits lim = {s->cfg.max_bulk, s->cfg.max_args, s->cfg.max_query,
                               SKV_SERVER_MAX_INLINE};
        skv_resp_init(&c->rp, &lim);
        c->ev = EPOLLIN;
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &e) != 0) {
            close(fd);
            skv_free(in);
            skv_free(c);
            continue;
        }
        c->next = s->clients;
        if (s->clients)
            s->clients->prev = c;
        s->clients = c;
        s->nclients++;
        s->accepted++;
    }
}

/* ------------------------------------------------------------------------
 * The socket
 * ---------------------------------------------------------------------- */
int srv_listen(skv_server *s, const char *path)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a.sun_path)
        return skv_error(SKV_ERR_ARG, "%s: socket path longer than %zu bytes", path,
                         sizeof a.sun_path - 1);
    memcpy(a.sun_path, path, strlen(path));
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return skv_error(SKV_ERR_ARG, "%s exists and is not a socket (not removed)", path);
        int p = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (p < 0)
            return skv_error(SKV_ERR_IO, "socket: %s", strerror(errno));
        int rc = connect(p, (struct sockaddr *)&a, sizeof a);
        int e = errno;
        close(p);
        if (rc == 0)
            return skv_error(SKV_ERR_ARG, "%s: a server is answering on it already", path);
        if (e != ECONNREFUSED)
            return skv_error(SKV_ERR_ARG, "%s: cannot tell whether it is stale: %s", path,
                             strerror(e));
        if (unlink(path) != 0)
            return skv_error(SKV_ERR_IO, "%s: removing the stale socket: %s", path, strerror(errno));
        srv_log(s, "removed the stale socket %s", path);
    } else if (errno != ENOENT) {
        return skv_error(SKV_ERR_IO, "%s: %s", path, strerror(errno));
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return skv_error(SKV_ERR_IO, "socket: %s", strerror(errno));
    /* 0600 from the first moment the path exists: the umask covers the
     * window between bind and chmod */
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    int e = errno;
    umask(old);
    if (rc != 0) {
        close(fd);
        return skv_error(SKV_ERR_IO, "%s: bind: %s", path, strerror(e));
    }
    /* then the config's mode (socket-mode: the group, or everyone; the
     * config's tenants still decide who is served) */
    const mode_t mode = s->cfg.socket_mode ? (mode_t)s->cfg.socket_mode : 0600;
    if (chmod(path, mode) != 0 || listen(fd, 256) != 0 || lstat(path, &st) != 0) {
        e = errno;
        close(fd);
        unlink(path);
        return skv_error(SKV_ERR_IO, "%s: %s", path, strerror(e));
    }
    s->sock_dev = st.st_dev;
    s->sock_ino = st.st_ino;
    s->lfd = fd;
    return 0;
}

/* 1 when a is a loopback address: 127.0.0.0/8, ::1, or ::ffff:127.x.y.z */
static int loopback(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *x = &((const struct sockaddr_in6 *)a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(x) || (IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127);
}

int srv_loopback_listen(const char *addr, int port, int *fd_out, char *name, size_t cap)
{
    struct sockaddr_storage a;
    socklen_t alen;
    memset(&a, 0, sizeof a);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&a;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&a;
    if (strcmp(addr, "localhost") == 0)
        addr = "127.0.0.1";
    if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        alen = sizeof *a4;
    } else if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        alen = sizeof *a6;
    } else {
        return skv_error(SKV_ERR_ARG, "bind %s: not a numeric IPv4 or IPv6 address", addr);
    }
    if (!loopback(&a))
        return skv_error(SKV_ERR_ARG, "bind %s: not a loopback address; seqkv serves TCP on "
                         "127.0.0.0/8 and ::1 only (no TLS yet): use the Unix socket, or a "
                         "tunnel, to reach it from elsewhere", addr);
    int fd = socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return skv_error(SKV_ERR_IO, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, alen) != 0 || listen(fd, 256) != 0) {
        int e = errno;
        close(fd);
        return skv_error(SKV_ERR_IO, "%s port %d: %s", addr, port, strerror(e));
    }
    snprintf(name, cap, a.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", addr, port);
    *fd_out = fd;
    return 0;
}

int srv_listen_tcp(skv_server *s, const char *addr, int port)
{
    return srv_loopback_listen(addr, port, &s->tfd, s->tcp_addr, sizeof s->tcp_addr);
}

/* Clients that have not authenticated within unauth-timeout are closed */
void srv_sweep_unauth(skv_server *s)
{
    const double now = srv_now();
    s->last_sweep = now;
    for (srv_client *c = s->clients, *next; c; c = next) {
        next = c->next;
        if (c->tenant < 0 && c->fd >= 0 && !c->busy &&
            now - c->since > (double)s->cfg.unauth_timeout) {
            refuse(dup(c->fd), "-ERR no AUTH within unauth-timeout: closing\r\n");
            srv_client_free(s, c);
        }
    }
}
