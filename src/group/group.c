/* SPDX-License-Identifier: MIT */
/*
 * The cache group object (docs/group.md): the member list loaded into a
 * view (each member with its peer: its connections, health and figures,
 * kept across reloads by "host:port"), a watcher thread that re-reads
 * the list when the file changes, the server when this node serves, and
 * the figures.  The fetch engine asks the group through peer.c's source
 * function; the view a request uses is pinned for it, so a reload never
 * frees what a request holds.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/util.h"
#include "group/group_int.h"
#include "tierfs/log.h"

/* ---- views ---- */

struct gview *gview_get(struct tfs_group *g)
{
    struct gview *v;

    pthread_mutex_lock(&g->lock);
    v = g->view;
    v->refs++;
    pthread_mutex_unlock(&g->lock);
    return v;
}

static void gview_free(struct gview *v)
{
    if (v == NULL)
        return;
    tfs_gmembers_cleanup(&v->m);
    tfs_free(v->peer);
    tfs_free(v);
}

void gview_put(struct tfs_group *g, struct gview *v)
{
    bool last;

    pthread_mutex_lock(&g->lock);
    last = --v->refs == 0;
    pthread_mutex_unlock(&g->lock);
    if (last)
        gview_free(v);
}

void group_key(char *out, size_t size, const char *host, uint16_t port)
{
    bool v6 = strchr(host, ':') != NULL;

    snprintf(out, size, "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "",
             (unsigned)port);
}

/* The peer of key, made when new (g->lock held); NULL: no memory. */
static struct gpeer *group_peer(struct tfs_group *g,
                                const struct tfs_gmember *m)
{
    char key[GROUP_KEY_MAX];
    struct tfs_hstr *h;
    struct gpeer *p;

    group_key(key, sizeof(key), m->host, m->port);
    h = tfs_hmap_find_str(&g->peers, key);
    if (h != NULL)
        return (struct gpeer *)(void *)h;
    p = tfs_calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    if (gpeer_init(p, m->host, m->port, g->tls_ca != NULL) < 0) {
        tfs_free(p);
        return NULL;
    }
    p->h.key = p->key;
    if (tfs_hmap_insert_str(&g->peers, &p->h) < 0) {
        gpeer_cleanup(p);
        tfs_free(p);
        return NULL;
    }
    p->next = g->all;
    g->all = p;
    g->n_all++;
    return p;
}

/*
 * Make members m (taken) the group's view.  Every listed member gets its
 * peer (kept from earlier lists), this node none.
 */
static int group_install(struct tfs_group *g, struct tfs_gmembers *m)
{
    struct gview *v = tfs_calloc(1, sizeof(*v));
    struct gview *old;
    int rc = 0;

    if (v == NULL || (v->peer = tfs_calloc(m->n, sizeof(*v->peer))) ==
                         NULL) {
        tfs_free(v);
        return -ENOMEM;
    }
    v->refs = 1;
    v->self = -1;
    pthread_mutex_lock(&g->lock);
    for (size_t i = 0; i < m->n && rc == 0; i++) {
        char key[GROUP_KEY_MAX];

        group_key(key, sizeof(key), m->m[i].host, m->m[i].port);
        if (g->self_key[0] != '\0' && strcmp(key, g->self_key) == 0) {
            v->self = (long)i;
            continue;
        }
        v->peer[i] = group_peer(g, &m->m[i]);
        if (v->peer[i] == NULL)
            rc = -ENOMEM;
    }
    if (rc < 0) {
        pthread_mutex_unlock(&g->lock);
        tfs_free(v->peer);
        tfs_free(v);
        return rc;
    }
    for (struct gpeer *p = g->all; p != NULL; p = p->next)
        p->member = false;
    for (size_t i = 0; i < m->n; i++) {
        if (v->peer[i] != NULL) {
            v->peer[i]->member = true;
            v->peer[i]->weight = m->m[i].weight;
        }
    }
    v->m = *m;
    memset(m, 0, sizeof(*m));
    old = g->view;
    g->view = v;
    pthread_mutex_unlock(&g->lock);
    if (old != NULL)
        gview_put(g, old);
    return 0;
}

/* ---- members from DNS ---- */

static int group_addr_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * "dns:NAME:PORT": every address NAME resolves to, a member each (weight
 * 1), as list lines in b, sorted so that a change is told by the text.
 */
static int group_dns_text(struct tfs_group *g, struct tfs_buf *b)
{
    const char *spec = g->members + 4;
    const char *colon = strrchr(spec, ':');
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    char name[TFS_GROUP_HOST_MAX];
    char *addrs[256];
    size_t n = 0;
    uint64_t port;
    int rc;

    if (colon == NULL || colon == spec ||
        (size_t)(colon - spec) >= sizeof(name) ||
        tfs_parse_u64(colon + 1, &port) < 0 || port == 0 || port > 65535)
        return tfs_err(TFS_EOPTION, "group '%s': want dns:NAME:PORT",
                       g->members);
    memcpy(name, spec, (size_t)(colon - spec));
    name[colon - spec] = '\0';
    rc = getaddrinfo(name, NULL, &hints, &ai);
    if (rc != 0)
        return tfs_err(-EHOSTUNREACH, "group '%s': %s", g->members,
                       gai_strerror(rc));
    for (struct addrinfo *a = ai; a != NULL && n < TFS_ARRAY_LEN(addrs);
         a = a->ai_next) {
        char ip[INET6_ADDRSTRLEN];
        const void *at = a->ai_family == AF_INET6
            ? (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr
            : (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr;
        bool dup = false;

        if (inet_ntop(a->ai_family, at, ip, sizeof(ip)) == NULL)
            continue;
        for (size_t i = 0; i < n && !dup; i++)
            dup = strcmp(addrs[i], ip) == 0;
        if (!dup && (addrs[n] = tfs_strdup(ip)) != NULL)
            n++;
    }
    freeaddrinfo(ai);
    qsort(addrs, n, sizeof(addrs[0]), group_addr_cmp);
    for (size_t i = 0; i < n; i++) {
        bool v6 = strchr(addrs[i], ':') != NULL;

        tfs_buf_printf(b, "%s%s%s:%u\n", v6 ? "[" : "", addrs[i],
                       v6 ? "]" : "", (unsigned)port);
        tfs_free(addrs[i]);
    }
    if (n == 0)
        return tfs_err(-EHOSTUNREACH, "group '%s': no address", g->members);
    return tfs_buf_error(b);
}

static bool group_is_dns(const struct tfs_group *g)
{
    return strncmp(g->members, "dns:", 4) == 0;
}

/*
 * Load the member list (the file, or the names DNS gives) and install it
 * if it parses.  st: the file's stat.  *same: DNS gave what it gave last.
 */
static int group_load(struct tfs_group *g, const struct stat *st,
                      bool *same)
{
    struct tfs_gmembers m = {0};
    struct tfs_buf b;
    uint64_t h = 0;
    int rc;

    *same = false;
    tfs_buf_init(&b, 1u << 20);
    if (group_is_dns(g)) {
        rc = group_dns_text(g, &b);
        h = rc == 0 ? XXH3_64bits(b.p, b.len) : 0;
        if (rc == 0 && h == g->dns_hash && g->view != NULL) {
            *same = true;
            tfs_buf_cleanup(&b);
            return 0;
        }
        if (rc == 0)
            rc = tfs_gmembers_parse(b.p, b.len, g->members, &m);
    } else {
        rc = tfs_gmembers_load(g->members, &m);
    }
    tfs_buf_cleanup(&b);
    if (rc == 0)
        rc = group_install(g, &m);
    tfs_gmembers_cleanup(&m);
    if (rc < 0) {
        atomic_fetch_add(&g->reload_errors, 1);
        return rc;
    }
    if (st != NULL)
        g->list_st = *st;
    g->dns_hash = h;
    atomic_fetch_add(&g->reloads, 1);
    return 0;
}

int tfs_group_reload(struct tfs_group *g)
{
    struct stat st = {0};
    bool same;
    int rc;

    if (!group_is_dns(g) && stat(g->members, &st) < 0)
        return tfs_err(-errno, "group list '%s'", g->members);
    rc = group_load(g, &st, &same);
    if (rc == 0 && same)
        return 0;
    if (rc < 0)
        TFS_WARN("group: list '%s' refused, keeping the one loaded: "
                 TFS_CAUSE_FMT, g->members,
                 TFS_CAUSE_ARGS(rc, tfs_errdetail()));
    else
        TFS_INFO("group: %zu members from '%s'", g->view->m.n, g->members);
    return rc;
}

/* ---- the list watcher ---- */

static bool group_changed(const struct stat *a, const struct stat *b)
{
    return a->st_ino != b->st_ino || a->st_dev != b->st_dev ||
           a->st_size != b->st_size ||
           a->st_mtim.tv_sec != b->st_mtim.tv_sec ||
           a->st_mtim.tv_nsec != b->st_mtim.tv_nsec;
}

/*
 * Every reload_ms: a list file that changed (or was replaced) is read;
 * a DNS name is resolved again every GROUP_DNS_TICKS of them.
 */
static void *group_watch(void *arg)
{
    struct tfs_group *g = arg;
    unsigned tick = 0;

    pthread_mutex_lock(&g->lock);
    while (!g->stopping) {
        struct stat st;

        tfs_cond_wait_ms(&g->wake, &g->lock, g->reload_ms);
        if (g->stopping)
            break;
        pthread_mutex_unlock(&g->lock);
        if (group_is_dns(g)) {
            if (++tick % GROUP_DNS_TICKS == 0)
                (void)tfs_group_reload(g);
        } else if (stat(g->members, &st) == 0 &&
                   group_changed(&st, &g->list_st)) {
            (void)tfs_group_reload(g);
        }
        pthread_mutex_lock(&g->lock);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

/* ---- open and close ---- */

static int group_cfg(struct tfs_group *g, const struct tfs_group_cfg *cfg)
{
    if (cfg->members == NULL || cfg->members[0] == '\0')
        return tfs_err(TFS_EOPTION, "group: no member list given");
    if (cfg->secret_file == NULL)
        return tfs_err(TFS_EOPTION, "group: no secret file given "
                       "(--group-secret-file)");
    if (cfg->serve && (cfg->listen == NULL || cfg->listen[0] == '\0'))
        return tfs_err(TFS_EOPTION, "group: serving needs the address "
                       "this node is listed under (--group-listen "
                       "HOST:PORT), or --group-serve off");
    g->members = tfs_strdup(cfg->members);
    g->listen = cfg->listen ? tfs_strdup(cfg->listen) : NULL;
    if (g->members == NULL || (cfg->listen != NULL && g->listen == NULL))
        return -ENOMEM;
    g->serve = cfg->serve;
    g->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : TFS_GROUP_TIMEOUT_MS;
    g->inflight = cfg->inflight ? cfg->inflight : TFS_GROUP_INFLIGHT;
    g->reload_ms = cfg->reload_ms ? cfg->reload_ms : 1000;
    g->fault_corrupt = cfg->fault_corrupt;
    g->ckpt_max = cfg->ckpt_max;
    g->ckpt_keep = cfg->ckpt_keep;
    if (cfg->ckpt_dir != NULL &&
        (g->ckpt_dir = tfs_strdup(cfg->ckpt_dir)) == NULL)
        return -ENOMEM;
    if ((cfg->tls_cert != NULL || cfg->tls_key != NULL) &&
        cfg->tls_ca == NULL)
        return tfs_err(TFS_EOPTION, "group: a TLS certificate wants the "
                       "CA that peers check it with (--group-tls-ca)");
    if (cfg->tls_ca != NULL && cfg->serve &&
        (cfg->tls_cert == NULL || cfg->tls_key == NULL))
        return tfs_err(TFS_EOPTION, "group: serving over TLS wants "
                       "--group-tls-cert and --group-tls-key");
    if (cfg->tls_ca != NULL) {
        int rc;

        g->tls_ca = tfs_strdup(cfg->tls_ca);
        if (g->tls_ca == NULL)
            return -ENOMEM;
        rc = access(g->tls_ca, R_OK) == 0 ? 0
             : tfs_err(-errno, "group TLS CA %s: %s", g->tls_ca,
                       strerror(errno));
        if (rc == 0 && cfg->serve)
            rc = group_read_pem(cfg->tls_cert, "certificate", false,
                                &g->tls_cert);
        if (rc == 0 && cfg->serve)
            rc = group_read_pem(cfg->tls_key, "key", true, &g->tls_key);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/*
 * This node's key from its listen address, as the list spells members:
 * "host:port" (the host as given), so "10.0.0.1:7070" matches the line
 * "10.0.0.1:7070".  Checked against the list when serving.
 */
static int group_self(struct tfs_group *g)
{
    struct tfs_gmembers one = {0};
    int rc;

    if (g->listen == NULL)
        return 0;
    rc = tfs_gmembers_parse(g->listen, strlen(g->listen), "--group-listen",
                            &one);
    if (rc < 0)
        return rc;
    group_key(g->self_key, sizeof(g->self_key), one.m[0].host,
              one.m[0].port);
    tfs_gmembers_cleanup(&one);
    return 0;
}

/*
 * The checkpoint copies this member keeps for its peers (ckstore.c):
 * only when it serves, with a directory and a quota.  Opened before the
 * server starts, closed after it stops.
 */
static int group_ckpt_open(struct tfs_group *g)
{
    char a[32];
    char b[32];
    uint64_t kept;
    uint64_t removed;
    int rc;

    if (!g->serve || g->ckpt_dir == NULL || g->ckpt_max == 0)
        return 0;
    rc = gck_open(g->ckpt_dir, g->ckpt_max, g->ckpt_keep, &g->ck);
    if (rc < 0)
        return rc;
    gck_usage(g->ck, &kept, &removed);
    TFS_INFO("group: keeping peers' checkpoint copies in %s (%s of %s "
             "used, the %u newest steps of each namespace)", g->ckpt_dir,
             tfs_fmt_bytes(a, sizeof(a), (double)kept),
             tfs_fmt_bytes(b, sizeof(b), (double)g->ckpt_max),
             g->ckpt_keep ? g->ckpt_keep : GCK_KEEP_DEFAULT);
    return 0;
}

/*
 * Make the group the cache's source of blocks before the store.  A
 * group with no cache (c NULL: a member that only keeps checkpoint
 * copies, or only pushes and pulls them) is no source: it has nowhere
 * to put a block, and its server answers block requests 503.
 */
static int group_source(struct tfs_group *g)
{
    struct tfs_cache_source src = {.read = gpeer_source, .arg = g,
                                   .kind = TFS_SOURCE_PEER};
    int rc;

    if (g->c == NULL)
        return 0;
    rc = tfs_cache_add_source(g->c, &src);
    if (rc < 0)
        return tfs_err(rc, "group: the cache has its sources already");
    g->sourced = true;
    return 0;
}

int tfs_group_open(struct tfs_group **out, const struct tfs_group_cfg *cfg,
                   struct tfs_cache *c)
{
    struct tfs_group *g = tfs_calloc(1, sizeof(*g));
    struct stat st = {0};
    bool same;
    int rc;

    if (g == NULL)
        return -ENOMEM;
    g->c = c;
    pthread_mutex_init(&g->lock, NULL);
    tfs_cond_init_mono(&g->wake);
    rc = group_cfg(g, cfg);
    if (rc == 0)
        rc = tfs_hmap_init(&g->peers, 0, tfs_hstr_eq);
    if (rc == 0)
        rc = group_self(g);
    if (rc == 0)
        rc = tfs_gauth_load(&g->auth, cfg->secret_file, TFS_GROUP_WINDOW_S);
    if (rc == 0 && !group_is_dns(g) && stat(g->members, &st) < 0)
        rc = tfs_err(-errno, "group list '%s'", g->members);
    if (rc == 0)
        rc = group_load(g, &st, &same);
    if (rc == 0 && g->serve && g->view->self < 0)
        rc = tfs_err(TFS_EOPTION, "group: this node (%s) is not in the "
                     "list '%s'; add it, or --group-serve off for a "
                     "client only", g->self_key, g->members);
    if (rc == 0 && cfg->self_elsewhere && g->view->self < 0)
        rc = tfs_err(TFS_EOPTION, "group: this node (%s) is not in the "
                     "list '%s'", g->self_key, g->members);
    if (rc == 0 && !g->serve && !cfg->self_elsewhere && g->view->self >= 0)
        rc = tfs_err(TFS_EOPTION, "group: %s is listed in '%s' but does "
                     "not serve (--group-serve off): peers would ask it "
                     "in vain", g->self_key, g->members);
    if (rc == 0)
        rc = group_ckpt_open(g);
    if (rc == 0 && g->serve)
        rc = gserve_start(g, &g->srv);
    if (rc == 0) {
        rc = pthread_create(&g->watcher, NULL, group_watch, g);
        rc = rc ? tfs_err(-rc, "group: cannot start its watcher") : 0;
        g->watching = rc == 0;
    }
    if (rc == 0)
        rc = group_source(g);
    if (rc < 0) {
        tfs_group_close(g);
        return rc;
    }
    TFS_INFO("group: %zu members from '%s'%s%s", g->view->m.n, g->members,
             g->serve ? ", serving as " : ", client only",
             g->serve ? g->self_key : "");
    *out = g;
    return 0;
}

void tfs_group_close(struct tfs_group *g)
{
    struct gpeer *p;

    if (g == NULL)
        return;
    if (g->c != NULL && g->sourced)
        tfs_cache_remove_source(g->c, g);
    if (g->watching) {
        pthread_mutex_lock(&g->lock);
        g->stopping = true;
        pthread_cond_broadcast(&g->wake);
        pthread_mutex_unlock(&g->lock);
        pthread_join(g->watcher, NULL);
    }
    gserve_stop(g->srv);
    gck_close(g->ck);                   /* no request left to use it */
    if (g->view != NULL)
        gview_put(g, g->view);
    while ((p = g->all) != NULL) {
        g->all = p->next;
        gpeer_cleanup(p);
        tfs_free(p);
    }
    tfs_hmap_cleanup(&g->peers);
    tfs_gauth_cleanup(&g->auth);
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    tfs_free(g->members);
    tfs_free(g->listen);
    tfs_free(g->tls_ca);
    tfs_free(g->ckpt_dir);
    tfs_free(g->tls_cert);
    if (g->tls_key != NULL)
        OPENSSL_cleanse(g->tls_key, strlen(g->tls_key));
    tfs_free(g->tls_key);
    tfs_free(g);
}

int group_read_pem(const char *path, const char *what, bool private,
                   char **out)
{
    struct stat sb;
    char *text = NULL;
    ssize_t n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    int rc = 0;

    if (fd < 0)
        return tfs_err(-errno, "group TLS %s %s: %s", what, path,
                       strerror(errno));
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) ||
        sb.st_size > (1 << 20))
        rc = tfs_err(-EINVAL, "group TLS %s %s: not a PEM file of at most "
                     "1 MiB", what, path);
    else if (private && (sb.st_uid != geteuid() || (sb.st_mode & 077)))
        rc = tfs_err(-EPERM, "group TLS %s %s may be read by others (mode "
                     "%03o): make it 0600 and yours", what, path,
                     (unsigned)(sb.st_mode & 0777));
    else if ((text = tfs_malloc((size_t)sb.st_size + 1)) == NULL)
        rc = -ENOMEM;
    else if ((n = read(fd, text, (size_t)sb.st_size)) != sb.st_size)
        rc = tfs_err(n < 0 ? -errno : -EIO, "group TLS %s %s: cannot read "
                     "it", what, path);
    close(fd);
    if (rc == 0 && strstr(text, "-----BEGIN ") == NULL)
        rc = tfs_err(-EINVAL, "group TLS %s %s: no PEM block in it", what,
                     path);
    if (rc < 0) {
        if (text != NULL)
            OPENSSL_cleanse(text, (size_t)sb.st_size + 1);
        tfs_free(text);
        return rc;
    }
    text[n] = '\0';
    *out = text;
    return 0;
}

uint16_t tfs_group_port(const struct tfs_group *g)
{
    return g->srv != NULL ? gserve_port(g->srv) : 0;
}

/* ---- figures ---- */

#define GROUP_N(f) ((uint64_t)atomic_load(&g->f))

int tfs_group_snap_get(struct tfs_group *g, struct tfs_group_snap *s)
{
    struct tfs_group_metrics *m = &s->g;
    size_t i = 0;

    memset(s, 0, sizeof(*s));
    snprintf(s->self, sizeof(s->self), "%s", g->self_key);
    m->self = s->self;
    m->asked = GROUP_N(asked);
    m->peer_hits = GROUP_N(peer_hits);
    m->peer_bytes = GROUP_N(peer_bytes);
    m->fallbacks = GROUP_N(fallbacks);
    m->owned = GROUP_N(owned);
    m->skipped = GROUP_N(skipped);
    m->hit_rate = m->asked ? (double)m->peer_hits / (double)m->asked : 0;
    m->served = GROUP_N(served);
    m->served_bytes = GROUP_N(served_bytes);
    m->served_ram = GROUP_N(served_ram);
    m->served_disk = GROUP_N(served_disk);
    m->served_store = GROUP_N(served_store);
    m->serve_errors = GROUP_N(serve_errors);
    m->refused = GROUP_N(refused);
    m->refused_store = GROUP_N(refused_store);
    m->reloads = GROUP_N(reloads);
    m->reload_errors = GROUP_N(reload_errors);
    m->ckpt_puts = GROUP_N(ckpt_puts);
    m->ckpt_put_bytes = GROUP_N(ckpt_put_bytes);
    m->ckpt_gets = GROUP_N(ckpt_gets);
    m->ckpt_get_bytes = GROUP_N(ckpt_get_bytes);
    m->ckpt_lists = GROUP_N(ckpt_lists);
    m->ckpt_full = GROUP_N(ckpt_full);
    m->ckpt_bad = GROUP_N(ckpt_bad);
    if (g->ck != NULL)
        gck_usage(g->ck, &m->ckpt_bytes, &m->ckpt_removed);
    pthread_mutex_lock(&g->lock);
    m->members = g->view->m.n;
    s->peers = tfs_calloc(g->n_all ? g->n_all : 1, sizeof(*s->peers));
    s->keys = tfs_calloc(g->n_all ? g->n_all : 1, sizeof(*s->keys));
    if (s->peers == NULL || s->keys == NULL) {
        pthread_mutex_unlock(&g->lock);
        tfs_group_snap_cleanup(s);
        return -ENOMEM;
    }
    for (struct gpeer *p = g->all; p != NULL; p = p->next, i++) {
        s->keys[i] = p->key;            /* lives as long as the group */
        s->peers[i].member = p->member;
        s->peers[i].weight = p->weight;
    }
    s->n = i;
    i = 0;
    for (struct gpeer *p = g->all; p != NULL; p = p->next, i++)
        gpeer_metrics(p, &s->peers[i]);
    pthread_mutex_unlock(&g->lock);
    return 0;
}

void tfs_group_snap_cleanup(struct tfs_group_snap *s)
{
    tfs_free(s->peers);
    tfs_free(s->keys);
    memset(s, 0, sizeof(*s));
}

#define GROUP_DESC(kind, name, type, unit, prom, help)                     \
    TFS_METRIC_DESC(struct tfs_group_metrics, kind, name, type, unit, prom, \
                    help)
#define GROUP_PEER_DESC(kind, name, type, unit, prom, help)                \
    TFS_METRIC_DESC(struct tfs_group_peer_metrics, kind, name, type, unit, \
                    prom, help)

static const struct tfs_metric group_metric_table[] = {
    TFS_GROUP_METRICS(GROUP_DESC)
};
static const struct tfs_metric group_peer_table[] = {
    TFS_GROUP_PEER_METRICS(GROUP_PEER_DESC)
};

const struct tfs_metric_section tfs_metrics_group = {
    .name = "group",
    .prom_prefix = "group_",
    .when = "mounts and cache nodes in a cache group (--group)",
    .m = group_metric_table,
    .n = TFS_ARRAY_LEN(group_metric_table),
    .size = sizeof(struct tfs_group_metrics),
};

const struct tfs_metric_section tfs_metrics_peers = {
    .name = "peers",
    .prom_prefix = "peer_",
    .when = "mounts and cache nodes in a cache group: a row a member",
    .m = group_peer_table,
    .n = TFS_ARRAY_LEN(group_peer_table),
    .size = sizeof(struct tfs_group_peer_metrics),
    .label = "peer",
};
