/* SPDX-License-Identifier: MIT */
/*
 * relay: a TCP relay that adds delay, jitter and stalls, for the fault
 * matrix (bench/faults, docs/reliability.md).  This kernel has no netem;
 * the relay stands in for it on the path from tierfs to the S3 server.
 *
 *   relay [-d DELAY_MS] [-j JITTER_MS] [-s STALL_FILE] [-t SECONDS]
 *         [-p PIDFILE] [-c COUNT_FILE] LISTEN_IP:PORT TARGET_IP:PORT
 *
 * Every chunk read from one side is held DELAY_MS plus a uniform draw in
 * [0, JITTER_MS] before it is written to the other side, in both
 * directions.  Chunks keep their order (a TCP stream cannot reorder): a
 * chunk is never released before the one ahead of it.  While STALL_FILE
 * exists (or after SIGUSR1, until SIGUSR2) nothing is read or written on
 * any connection and nothing is closed: a stall, not a reset.
 *
 * With -c, COUNT_FILE holds the relay's counters as "NAME VALUE" lines:
 * conns (accepted), refused, up (bytes written to the target: what the
 * clients sent) and down (bytes written to the clients: what the target
 * sent, e.g. a store's egress).  It is replaced whole (a rename) at most
 * every COUNT_MS while the counters change, and once more at exit.
 *
 * Bounded: at most RELAY_MAX_CONNS connections (more are refused), at most
 * RELAY_MAX_QUEUED bytes held per direction (the relay stops reading that
 * side until it drains), and it exits after SECONDS (default 3600) or as
 * soon as its parent dies.  One thread, one poll loop.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RELAY_MAX_CONNS  256
#define RELAY_MAX_QUEUED (4u << 20)
#define RELAY_CHUNK      (64u << 10)
#define RELAY_TICK_MS    10             /* stall-file and deadline polling */
#define NS_PER_MS        1000000ull
#define COUNT_MS         100            /* -c: the file's refresh period */

struct chunk {
    struct chunk *next;
    uint64_t      due_ns;               /* not written before this */
    size_t        len;
    size_t        off;                  /* bytes already written */
    char          data[];
};

/* One direction of a connection: read from `from`, write to `to`. */
struct pipe {
    struct chunk *head, *tail;
    size_t        queued;
    int           eof;                  /* `from` said EOF */
    int           shut;                 /* EOF passed on to `to` */
};

struct conn {
    int         fd[2];                  /* 0: client, 1: target */
    int         connecting;             /* target connect in progress */
    struct pipe p[2];                   /* p[0]: client->target */
};

static struct conn *conns[RELAY_MAX_CONNS];
static volatile sig_atomic_t sig_stall;
static volatile sig_atomic_t sig_stop;
static uint64_t delay_ns, jitter_ns, rng = 0x9e3779b97f4a7c15ull;
static const char *stall_file;
static struct sockaddr_in target;
static unsigned long n_accepted, n_refused;
static unsigned long long n_bytes;
static unsigned long long n_dir[2];     /* written: 0 to the target, 1 back */
static const char *count_file;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int stalled(void)
{
    struct stat sb;

    return sig_stall || (stall_file != NULL && stat(stall_file, &sb) == 0);
}

static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        sig_stall = 1;
    else if (sig == SIGUSR2)
        sig_stall = 0;
    else
        sig_stop = 1;
}

static int parse_addr(const char *s, struct sockaddr_in *sa)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    char *end;
    long port;

    if (colon == NULL || (size_t)(colon - s) >= sizeof(host))
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 0 || port > 65535)
        return -1;
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static void conn_free(struct conn *c)
{
    for (int d = 0; d < 2; d++) {
        struct chunk *k = c->p[d].head;

        while (k != NULL) {
            struct chunk *next = k->next;

            free(k);
            k = next;
        }
        if (c->fd[d] >= 0)
            close(c->fd[d]);
    }
    free(c);
}

static void conn_open(int lfd)
{
    int one = 1, slot = -1, cfd;
    struct conn *c;

    cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0)
        return;
    for (int i = 0; i < RELAY_MAX_CONNS && slot < 0; i++)
        if (conns[i] == NULL)
            slot = i;
    c = slot >= 0 ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL) {
        n_refused++;
        close(cfd);
        return;
    }
    c->fd[0] = cfd;
    c->fd[1] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd[1] < 0) {
        conn_free(c);
        return;
    }
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(c->fd[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(c->fd[1], (struct sockaddr *)&target, sizeof(target)) < 0) {
        if (errno != EINPROGRESS) {
            conn_free(c);
            return;
        }
        c->connecting = 1;
    }
    conns[slot] = c;
    n_accepted++;
}

/* Read one chunk from p's source; 0 ok or would block, -1 to close. */
static int pipe_read(struct pipe *p, int from, uint64_t now)
{
    struct chunk *k = malloc(sizeof(*k) + RELAY_CHUNK);
    uint64_t due;
    ssize_t n;

    if (k == NULL)
        return 0;
    n = read(from, k->data, RELAY_CHUNK);
    if (n <= 0) {
        free(k);
        if (n == 0)
            p->eof = 1;
        return n < 0 && errno != EAGAIN && errno != EINTR ? -1 : 0;
    }
    due = now + delay_ns + (jitter_ns ? rng_next() % (jitter_ns + 1) : 0);
    if (p->tail != NULL && due < p->tail->due_ns)
        due = p->tail->due_ns;          /* never overtake */
    k->next = NULL;
    k->due_ns = due;
    k->len = (size_t)n;
    k->off = 0;
    if (p->tail != NULL)
        p->tail->next = k;
    else
        p->head = k;
    p->tail = k;
    p->queued += (size_t)n;
    return 0;
}

/* Write what is due of direction d; 0 ok or would block, -1 to close. */
static int pipe_write(struct pipe *p, int d, int to, uint64_t now)
{
    while (p->head != NULL && p->head->due_ns <= now) {
        struct chunk *k = p->head;
        ssize_t n = write(to, k->data + k->off, k->len - k->off);

        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        k->off += (size_t)n;
        p->queued -= (size_t)n;
        n_bytes += (unsigned long long)n;
        n_dir[d] += (unsigned long long)n;
        if (k->off < k->len)
            return 0;
        p->head = k->next;
        if (p->head == NULL)
            p->tail = NULL;
        free(k);
    }
    if (p->head == NULL && p->eof && !p->shut) {
        shutdown(to, SHUT_WR);
        p->shut = 1;
    }
    return 0;
}

static int conn_connected(struct conn *c)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err)
        return -1;
    c->connecting = 0;
    return 0;
}

/* Service one connection after poll; -1 when it is to be closed. */
static int conn_step(struct conn *c, const struct pollfd *pf, uint64_t now)
{
    if (c->connecting) {
        if (pf[1].revents & (POLLOUT | POLLERR | POLLHUP))
            return conn_connected(c);
        return 0;
    }
    for (int d = 0; d < 2; d++) {
        struct pipe *p = &c->p[d];

        if ((pf[d].revents & (POLLIN | POLLHUP | POLLERR)) && !p->eof &&
            p->queued < RELAY_MAX_QUEUED && pipe_read(p, c->fd[d], now) < 0)
            return -1;
        if (pipe_write(p, d, c->fd[1 - d], now) < 0)
            return -1;
    }
    return c->p[0].shut && c->p[1].shut ? -1 : 0;
}

/* The poll set for one connection: two entries. */
static void conn_events(const struct conn *c, struct pollfd *pf, int stall,
                        uint64_t now, uint64_t *wake)
{
    for (int d = 0; d < 2; d++) {
        pf[d].fd = c->fd[d];
        pf[d].events = 0;
        pf[d].revents = 0;
    }
    if (c->connecting) {
        pf[0].fd = -1;
        pf[1].events = POLLOUT;
        return;
    }
    if (stall)
        return;
    for (int d = 0; d < 2; d++) {
        const struct pipe *p = &c->p[d];

        if (!p->eof && p->queued < RELAY_MAX_QUEUED)
            pf[d].events |= POLLIN;
        if (p->head != NULL && p->head->due_ns <= now)
            pf[1 - d].events |= POLLOUT;
        else if (p->head != NULL && p->head->due_ns < *wake)
            *wake = p->head->due_ns;
    }
    for (int d = 0; d < 2; d++)         /* a hung-up fd must not spin */
        if (pf[d].events == 0)
            pf[d].fd = -1;
}

/* -c: COUNT_FILE replaced whole (written beside it, then renamed). */
static void count_write(void)
{
    char tmp[4096];
    FILE *f;

    if (count_file == NULL ||
        snprintf(tmp, sizeof(tmp), "%s.tmp", count_file) >= (int)sizeof(tmp))
        return;
    f = fopen(tmp, "w");
    if (f == NULL)
        return;
    fprintf(f, "conns %lu\nrefused %lu\nup %llu\ndown %llu\n", n_accepted,
            n_refused, n_dir[0], n_dir[1]);
    if (fclose(f) == 0)
        rename(tmp, count_file);
}

/* count_write when a counter changed and COUNT_MS have passed. */
static void count_tick(uint64_t now)
{
    static uint64_t last_ns;
    static unsigned long long last_sum = ~0ull;
    unsigned long long sum = n_accepted + n_refused + n_bytes;

    if (sum == last_sum || now - last_ns < COUNT_MS * NS_PER_MS)
        return;
    count_write();
    last_ns = now;
    last_sum = sum;
}

static int listen_on(const struct sockaddr_in *sa)
{
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0 ||
        listen(fd, 128) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void loop(int lfd, uint64_t end_ns, pid_t parent)
{
    static struct pollfd pf[1 + 2 * RELAY_MAX_CONNS];

    while (!sig_stop && getppid() == parent) {
        uint64_t now = now_ns();
        uint64_t wake = now + RELAY_TICK_MS * NS_PER_MS;
        int stall = stalled(), timeout;

        if (now >= end_ns)
            break;
        count_tick(now);
        pf[0].fd = lfd;
        pf[0].events = POLLIN;
        pf[0].revents = 0;
        for (int i = 0; i < RELAY_MAX_CONNS; i++) {
            pf[1 + 2 * i].fd = -1;
            pf[2 + 2 * i].fd = -1;
            if (conns[i] != NULL)
                conn_events(conns[i], &pf[1 + 2 * i], stall, now, &wake);
        }
        timeout = (int)((wake - now + NS_PER_MS - 1) / NS_PER_MS);
        if (poll(pf, 1 + 2 * RELAY_MAX_CONNS, timeout) < 0 && errno != EINTR)
            break;
        now = now_ns();
        if (pf[0].revents & POLLIN)
            conn_open(lfd);
        for (int i = 0; i < RELAY_MAX_CONNS; i++) {
            if (conns[i] == NULL || (stall && !conns[i]->connecting))
                continue;
            if (conn_step(conns[i], &pf[1 + 2 * i], now) < 0) {
                conn_free(conns[i]);
                conns[i] = NULL;
            }
        }
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: relay [-d DELAY_MS] [-j JITTER_MS] [-s STALL_FILE] "
            "[-t SECONDS] [-p PIDFILE] [-c COUNT_FILE]\n"
            "             LISTEN_IP:PORT TARGET_IP:PORT\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct sockaddr_in lsa;
    struct sigaction sa;
    double secs = 3600;
    const char *pidfile = NULL;
    pid_t parent = getppid();
    int opt, lfd;

    while ((opt = getopt(argc, argv, "d:j:s:t:p:c:")) != -1) {
        switch (opt) {
        case 'd': delay_ns = (uint64_t)(atof(optarg) * NS_PER_MS); break;
        case 'j': jitter_ns = (uint64_t)(atof(optarg) * NS_PER_MS); break;
        case 's': stall_file = optarg; break;
        case 't': secs = atof(optarg); break;
        case 'p': pidfile = optarg; break;
        case 'c': count_file = optarg; break;
        default: return usage();
        }
    }
    if (argc - optind != 2 || secs <= 0 || parse_addr(argv[optind], &lsa) ||
        parse_addr(argv[optind + 1], &target))
        return usage();
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    rng ^= (uint64_t)getpid() << 32 ^ now_ns();
    lfd = listen_on(&lsa);
    if (lfd < 0) {
        fprintf(stderr, "relay: listen on %s: %s\n", argv[optind],
                strerror(errno));
        return 1;
    }
    if (pidfile != NULL) {
        FILE *f = fopen(pidfile, "w");

        if (f != NULL) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    loop(lfd, now_ns() + (uint64_t)(secs * 1e9), parent);
    for (int i = 0; i < RELAY_MAX_CONNS; i++)
        if (conns[i] != NULL)
            conn_free(conns[i]);
    close(lfd);
    count_write();
    fprintf(stderr, "relay: %lu connections, %lu refused, %llu bytes\n",
            n_accepted, n_refused, n_bytes);
    return 0;
}
