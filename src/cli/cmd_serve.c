/* SPDX-License-Identifier: MIT */
/*
 * tierfs serve URI --group FILE --group-listen HOST:PORT
 *              --group-secret-file FILE [--cache-dir DIR ...]: a dedicated
 * cache node of a cache group (docs/group.md), with no mount and no
 * training on it: it answers peers' block requests from its RAM and
 * disk tiers, reading the store once on a miss, and keeps peers'
 * checkpoint copies (CACHE_DIR/ckpt-peer by default).  Runs in the foreground
 * (a service manager or a pod keeps it): SIGTERM or SIGINT stops it,
 * SIGHUP re-reads the member list.
 */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"
#include "group/group.h"
#include "metrics/http.h"
#include "metrics/metrics.h"
#include "tierfs/cache.h"
#include "tierfs/log.h"
#include "tierfs/store.h"

#define SERVE_MAX_SETS 32

struct serve_args {
    struct tfs_group_cfg g;
    const char          *metrics;       /* ADDR:PORT or NULL */
    const char          *names[SERVE_MAX_SETS];   /* cache settings */
    const char          *values[SERVE_MAX_SETS];
    size_t               n;
};

struct serve_node {
    struct tfs_store *st;
    struct tfs_cache *c;
    struct tfs_group *g;
};

static void serve_help(FILE *f)
{
    fprintf(f,
            "usage: tierfs serve [options] URI\n\n"
            "Run a dedicated cache node of a cache group: no mount; it "
            "answers\nits peers' block requests from its RAM and disk "
            "tiers and reads the\nstore at URI once on a miss "
            "(docs/group.md).  Stays in the\nforeground: SIGTERM stops "
            "it, SIGHUP re-reads the member list.\n\n"
            "  --group FILE          the member list (host:port [weight])\n"
            "  --group-listen HOST:PORT  this node's line in FILE; the\n"
            "                        listener binds there\n"
            "  --group-secret-file F the group's secret (mode 0600)\n"
            "  --group-timeout MS    its own peer requests (default 3000)\n"
            "  --group-tls-ca F      peers over TLS, checked against F\n"
            "  --group-tls-cert F, --group-tls-key F   its certificate\n"
            "                        and key (PEM; the key 0600)\n"
            "  --group-ckpt-dir DIR  keep peers' checkpoint copies here\n"
            "                        (default CACHE_DIR/ckpt-peer; none\n"
            "                        without --cache-dir)\n"
            "  --group-ckpt-max SIZE at most this much of them (default "
            "64G;\n                        0: keep none)\n"
            "  --group-ckpt-keep N   newest steps kept per job (default 2)\n"
            "  --cache-dir DIR       disk tier (default: RAM only)\n"
            "  --cache-size SIZE     bytes of the disk tier (default 10G)\n"
            "  --mem-cache SIZE      bytes of the RAM tier (default 1G)\n"
            "  --block-size SIZE     block size: the group's (default 4M)\n"
            "  --max-inflight N      concurrent store reads (default 32)\n"
            "  --metrics ADDR:PORT   Prometheus endpoint\n"
            "  --set NAME=VALUE      any cache option (docs/fuse.md)\n");
}

static int serve_set(struct serve_args *a, const char *name,
                     const char *value)
{
    if (a->n == SERVE_MAX_SETS)
        return cli_usage_error("serve", "too many options");
    a->names[a->n] = name;
    a->values[a->n++] = value;
    return 0;
}

enum {
    SERVE_GROUP = 1000, SERVE_LISTEN, SERVE_SECRET, SERVE_TIMEOUT,
    SERVE_METRICS, SERVE_SET, SERVE_CACHE_DIR, SERVE_CACHE_SIZE,
    SERVE_MEM, SERVE_BLOCK, SERVE_INFLIGHT, SERVE_TLS_CA, SERVE_TLS_CERT,
    SERVE_TLS_KEY, SERVE_CKPT_DIR, SERVE_CKPT_MAX, SERVE_CKPT_KEEP,
};

/* The checkpoint copy options (docs/group.md); 0 or a usage error. */
static int serve_ckpt_opt(struct serve_args *a, int c, const char *arg)
{
    if (c == SERVE_CKPT_DIR) {
        a->g.ckpt_dir = arg;
        return 0;
    }
    if (c == SERVE_CKPT_MAX)
        return cli_parse_size("serve", "--group-ckpt-max", arg,
                              &a->g.ckpt_max);
    return cli_parse_uint("serve", "--group-ckpt-keep", arg, 1, 1000000,
                          &a->g.ckpt_keep);
}

static int serve_parse(int argc, char **argv, struct serve_args *a)
{
    static const struct option longopts[] = {
        {"group", required_argument, NULL, SERVE_GROUP},
        {"group-listen", required_argument, NULL, SERVE_LISTEN},
        {"group-secret-file", required_argument, NULL, SERVE_SECRET},
        {"group-timeout", required_argument, NULL, SERVE_TIMEOUT},
        {"metrics", required_argument, NULL, SERVE_METRICS},
        {"set", required_argument, NULL, SERVE_SET},
        {"cache-dir", required_argument, NULL, SERVE_CACHE_DIR},
        {"cache-size", required_argument, NULL, SERVE_CACHE_SIZE},
        {"mem-cache", required_argument, NULL, SERVE_MEM},
        {"block-size", required_argument, NULL, SERVE_BLOCK},
        {"max-inflight", required_argument, NULL, SERVE_INFLIGHT},
        {"group-tls-ca", required_argument, NULL, SERVE_TLS_CA},
        {"group-tls-cert", required_argument, NULL, SERVE_TLS_CERT},
        {"group-tls-key", required_argument, NULL, SERVE_TLS_KEY},
        {"group-ckpt-dir", required_argument, NULL, SERVE_CKPT_DIR},
        {"group-ckpt-max", required_argument, NULL, SERVE_CKPT_MAX},
        {"group-ckpt-keep", required_argument, NULL, SERVE_CKPT_KEEP},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    unsigned timeout = 0;
    int rc = 0;
    int c;

    a->g.serve = true;
    a->g.ckpt_max = 64ull << 30;
    a->g.ckpt_keep = 2;
    while (rc == 0 &&
           (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *eq;

        switch (c) {
        case SERVE_GROUP:
            a->g.members = optarg;
            break;
        case SERVE_LISTEN:
            a->g.listen = optarg;
            break;
        case SERVE_SECRET:
            a->g.secret_file = optarg;
            break;
        case SERVE_TIMEOUT:
            rc = cli_parse_uint("serve", "--group-timeout", optarg, 1,
                                600000, &timeout);
            a->g.timeout_ms = timeout;
            break;
        case SERVE_METRICS:
            a->metrics = optarg;
            break;
        case SERVE_SET:
            eq = strchr(optarg, '=');
            if (eq == NULL || eq == optarg)
                return cli_usage_error("serve", "--set wants NAME=VALUE, "
                                       "not '%s'", optarg);
            *eq = '\0';
            rc = serve_set(a, optarg, eq + 1);
            break;
        case SERVE_CACHE_DIR:
            rc = serve_set(a, "cache_dir", optarg);
            break;
        case SERVE_CACHE_SIZE:
            rc = serve_set(a, "cache_size", optarg);
            break;
        case SERVE_MEM:
            rc = serve_set(a, "mem_cache", optarg);
            break;
        case SERVE_BLOCK:
            rc = serve_set(a, "block_size", optarg);
            break;
        case SERVE_INFLIGHT:
            rc = serve_set(a, "max_inflight", optarg);
            break;
        case SERVE_TLS_CA:
            a->g.tls_ca = optarg;
            break;
        case SERVE_TLS_CERT:
            a->g.tls_cert = optarg;
            break;
        case SERVE_TLS_KEY:
            a->g.tls_key = optarg;
            break;
        case SERVE_CKPT_DIR:
        case SERVE_CKPT_MAX:
        case SERVE_CKPT_KEEP:
            rc = serve_ckpt_opt(a, c, optarg);
            break;
        case 'h':
            serve_help(stdout);
            return -1;
        default:
            serve_help(stderr);
            return CLI_USAGE;
        }
    }
    if (rc == 0 && argc - optind != 1)
        rc = cli_usage_error("serve", "want one URI");
    if (rc == 0 && (a->g.members == NULL || a->g.listen == NULL ||
                    a->g.secret_file == NULL))
        rc = cli_usage_error("serve", "--group, --group-listen and "
                             "--group-secret-file are required");
    return rc;
}

/* /metrics: the cache's, the store's, the group's and its peers'. */
static int serve_fill(void *arg, struct tfs_buf *out)
{
    struct serve_node *n = arg;
    struct tfs_cache_metrics cm;
    struct tfs_store_stats ss;
    struct tfs_group_snap gs;
    struct tfs_metric_src src[4];
    int rc = tfs_group_snap_get(n->g, &gs);

    if (rc < 0)
        return rc;
    tfs_cache_metrics_get(n->c, &cm);
    tfs_store_get_stats(n->st, &ss);
    src[0] = (struct tfs_metric_src){.sec = &tfs_metrics_cache, .data = &cm};
    src[1] = (struct tfs_metric_src){.sec = &tfs_metrics_store, .data = &ss};
    src[2] = (struct tfs_metric_src){.sec = &tfs_metrics_group,
                                     .data = &gs.g};
    src[3] = (struct tfs_metric_src){
        .sec = &tfs_metrics_peers, .data = gs.peers,
        .keys = (const char *const *)gs.keys, .rows = gs.n};
    rc = tfs_metrics_prometheus(out, src, 4);
    tfs_group_snap_cleanup(&gs);
    return rc;
}

/* Wait for signals: SIGHUP reloads, SIGTERM/SIGINT return. */
static void serve_wait(struct serve_node *n, const sigset_t *set)
{
    for (;;) {
        int sig = 0;

        if (sigwait(set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            (void)tfs_group_reload(n->g);
            continue;
        }
        fprintf(stderr, "tierfs serve: %s: stopping\n", strsignal(sig));
        return;
    }
}

/*
 * The group's settings: the checkpoint copies default to
 * CACHE_DIR/ckpt-peer, none without a cache dir.  *dir: what to free.
 */
static int serve_group_cfg(const struct serve_args *a, struct tfs_cache *c,
                           struct tfs_group_cfg *cfg, char **dir)
{
    struct tfs_buf b;

    *cfg = a->g;
    *dir = NULL;
    if (cfg->ckpt_dir != NULL || tfs_cache_dir(c) == NULL)
        return 0;
    tfs_buf_init(&b, 0);
    tfs_buf_printf(&b, "%s/ckpt-peer", tfs_cache_dir(c));
    *dir = tfs_buf_steal(&b);
    cfg->ckpt_dir = *dir;
    return *dir != NULL ? 0 : -ENOMEM;
}

static int serve_run(const struct serve_args *a, const char *uri)
{
    struct serve_node n = {0};
    struct tfs_http *http = NULL;
    struct tfs_group_cfg cfg;
    char *ckpt_dir = NULL;
    sigset_t set;
    int rc;

    /* Every thread made from here on leaves these to sigwait. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    rc = tfs_store_open(&n.st, uri, cli_store_options);
    if (rc < 0)
        return cli_fail("serve", uri, rc);
    rc = tfs_cache_create(&n.c);
    for (size_t i = 0; rc == 0 && i < a->n; i++) {
        rc = tfs_cache_set(n.c, a->names[i], a->values[i]);
        if (rc < 0) {
            char what[160];

            snprintf(what, sizeof(what), "option %s=%s", a->names[i],
                     a->values[i]);
            cli_fail("serve", what, rc);
            goto out;
        }
    }
    if (rc == 0)
        rc = tfs_cache_open(n.c, n.st);
    if (rc < 0) {
        cli_fail("serve", uri, rc);
        goto out;
    }
    rc = serve_group_cfg(a, n.c, &cfg, &ckpt_dir);
    if (rc == 0)
        rc = tfs_group_open(&n.g, &cfg, n.c);
    if (rc < 0) {
        cli_fail("serve", a->g.members, rc);
        goto out;
    }
    if (a->metrics != NULL) {
        rc = tfs_http_start(a->metrics, serve_fill, &n, &http);
        if (rc < 0) {
            cli_fail("serve", a->metrics, rc);
            goto out;
        }
    }
    fprintf(stderr, "tierfs serve: serving %s to the group of %s on %s "
            "(port %u)%s%s\n", uri, a->g.members, a->g.listen,
            (unsigned)tfs_group_port(n.g), http ? "; metrics on " : "",
            http ? a->metrics : "");
    serve_wait(&n, &set);
out:
    tfs_http_stop(http);
    tfs_group_close(n.g);
    tfs_cache_close(n.c);
    tfs_store_close(n.st);
    tfs_free(ckpt_dir);
    return rc < 0 ? CLI_FAIL : CLI_OK;
}

int cmd_serve(int argc, char **argv)
{
    struct serve_args a = {.n = 0};
    int rc = serve_parse(argc, argv, &a);

    if (rc != 0)
        return rc < 0 ? CLI_OK : rc;
    mallopt(M_MMAP_THRESHOLD, 128 << 10);   /* as the mount (cmd_mount.c) */
    tfs_nofile_raise(NULL);
    return serve_run(&a, argv[optind]);
}
