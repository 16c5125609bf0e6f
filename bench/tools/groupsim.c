/* SPDX-License-Identifier: MIT */
/*
 * groupsim: the cache group (docs/group.md) at scale, on paper: N nodes
 * reading one dataset through the group, placed by the real placement
 * code (src/group/member.c: the member list parsed by tfs_gmembers_parse,
 * every sampled block ranked by tfs_gmembers_rank).  docs/group-sim.md
 * has the model, its assumptions and its figures.
 *
 *   groupsim [--calib FILE] [--NAME VALUE ...] [--check] [--exact-owners]
 *
 * The file, in order: the parameters (one table: defaults, a calibration
 * file of "name value" lines, the command line; all printed); the members
 * and a random sample of blocks ranked once (top GS_TOP members each);
 * then the reports: store egress per epoch with and without the group
 * and the group hit ratio; per-peer fan-in; blocks moved by a leave and
 * a join; the egress of membership changes that nodes see at different
 * times; the latency of a block fetch with one slow peer.  --check
 * asserts the model's invariants (ctest bench.group-sim) and exits 1 when
 * one fails; --exact-owners counts the owner of every block of the
 * dataset, not a sample.  Exit status 2: a usage error.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "group/group.h"

#define GS_TOP 16                       /* members kept per block */
#define GS_JOINERS 5                    /* members that may join */
#define GS_CHANGES_MAX 10
#define GS_XCHECK 2000                  /* blocks ranked again, per view */
#define GS_BINS 2600                    /* latency histogram, 1% bins */
#define GS_BIN0_MS 1e-3
#define GS_NONE UINT32_MAX

/* ---- parameters ---- */

struct gs_par {
    const char *name;
    double      v;
    const char *src;                    /* "default", a file, "argv" */
    const char *what;
};

enum {
    P_NODES, P_DATASET, P_BLOCK, P_CACHE, P_SPREAD, P_SAMPLE, P_SEED,
    P_THREADS, P_RATE, P_WINDOW, P_LOCAL, P_RTT, P_PEER50, P_PEER99,
    P_STORE50, P_STORE99, P_TIMEOUT, P_BACKOFF, P_SLOW, P_LATSEC,
    P_FBSTORE, P_TOMISS, P_NPAR
};

static struct gs_par gs_par[P_NPAR] = {
    [P_NODES] = {"nodes", 1000, "default", "group members, each a reader"},
    [P_DATASET] = {"dataset_bytes", 1e14, "default", "the dataset"},
    [P_BLOCK] = {"block_bytes", 4194304, "default", "block size"},
    [P_CACHE] = {"cache_bytes", 1e12, "default",
                 "a node's cache (mean; the weight is its share)"},
    [P_SPREAD] = {"weight_spread", 1, "default",
                  "weights uniform in [1, spread]; 1: all equal"},
    [P_SAMPLE] = {"sample_blocks", 200000, "default",
                  "blocks simulated, a random sample"},
    [P_SEED] = {"seed", 1, "default", "random seed"},
    [P_THREADS] = {"threads", 2, "default", "worker threads"},
    [P_RATE] = {"read_bytes_per_s", 2e9, "default",
                "a node's read rate (sets the epoch's length)"},
    [P_WINDOW] = {"view_window_s", 30, "default",
                  "time a member change takes to reach every node"},
    [P_LOCAL] = {"local_hit_ms", 2, "default",
                 "a block from the local disk tier"},
    [P_RTT] = {"rtt_ms", 0.1, "default", "round trip between two nodes"},
    [P_PEER50] = {"peer_p50_ms", 4, "default",
                  "a peer serving a block from its tiers, p50 (no RTT)"},
    [P_PEER99] = {"peer_p99_ms", 20, "default", "the same, p99"},
    [P_STORE50] = {"store_p50_ms", 40, "default",
                   "a block GET from the capacity store, p50"},
    [P_STORE99] = {"store_p99_ms", 250, "default", "the same, p99"},
    [P_TIMEOUT] = {"timeout_ms", 100, "default", "peer timeout T"},
    [P_BACKOFF] = {"backoff_s", 30, "default", "suspect back-off B"},
    [P_SLOW] = {"slow_ms", 1000, "default",
                "X: time added to every answer of the one slow peer"},
    [P_LATSEC] = {"lat_seconds", 60, "default",
                  "simulated seconds of reads, latency part"},
    [P_FBSTORE] = {"fallback_store", 0, "default",
                   "a suspect's blocks: 0 next member, 1 the store"},
    [P_TOMISS] = {"timeout_covers_miss", 0, "default",
                  "1: T also cuts an owner's own store GET on its miss"},
};

#define PV(i) (gs_par[i].v)

/* A number ("2.5", "1e14") or a size ("100TB", "4M"). */
static int gs_value(const char *s, double *v)
{
    uint64_t n;

    if (tfs_parse_double(s, v) == 0)
        return 0;
    if (tfs_parse_size(s, &n) < 0)
        return -1;
    *v = (double)n;
    return 0;
}

/* Set parameter name from s; -1 for no such name, -2 for a bad value. */
static int gs_set(const char *name, const char *s, const char *src)
{
    for (size_t i = 0; i < P_NPAR; i++) {
        if (strcmp(gs_par[i].name, name) != 0)
            continue;
        if (gs_value(s, &gs_par[i].v) < 0)
            return -2;
        gs_par[i].src = src;
        return 0;
    }
    return -1;
}

/* Read "name value" lines ('#' comments) from path. */
static int gs_calib(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];
    unsigned no = 0;

    if (f == NULL) {
        fprintf(stderr, "groupsim: %s: %s\n", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char name[64], val[64], extra[2];
        char *hash = strchr(line, '#');
        int k;

        no++;
        if (hash != NULL)
            *hash = '\0';
        k = sscanf(line, "%63s %63s %1s", name, val, extra);
        if (k <= 0)
            continue;
        if (k != 2 || gs_set(name, val, path) < 0) {
            fprintf(stderr, "groupsim: %s:%u: not \"name value\" with a "
                    "known name and a number\n", path, no);
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    return 0;
}

static void gs_usage(void)
{
    fprintf(stderr, "usage: groupsim [--calib FILE] [--NAME VALUE ...] "
            "[--check] [--exact-owners]\nparameters (default):\n");
    for (size_t i = 0; i < P_NPAR; i++)
        fprintf(stderr, "  --%-18s %-10g %s\n", gs_par[i].name, gs_par[i].v,
                gs_par[i].what);
}

/* Whether the parameters make a model; complains on stderr if not. */
static bool gs_par_ok(void)
{
    const char *bad = NULL;

    if (PV(P_NODES) < 2 || PV(P_NODES) > 60000 ||
        PV(P_NODES) != floor(PV(P_NODES)))
        bad = "nodes: a whole number in 2..60000";
    else if (PV(P_SAMPLE) < 100 || PV(P_SAMPLE) > 1e8)
        bad = "sample_blocks: 100..1e8";
    else if (PV(P_BLOCK) < 1 || PV(P_DATASET) < PV(P_BLOCK))
        bad = "block_bytes >= 1 and dataset_bytes >= block_bytes";
    else if (PV(P_SAMPLE) > ceil(PV(P_DATASET) / PV(P_BLOCK)))
        bad = "sample_blocks: at most the dataset's blocks";
    else if (PV(P_CACHE) <= 0 || PV(P_SPREAD) < 1 || PV(P_RATE) <= 0)
        bad = "cache_bytes > 0, weight_spread >= 1, read_bytes_per_s > 0";
    else if (PV(P_THREADS) < 1 || PV(P_THREADS) > 64)
        bad = "threads: 1..64";
    else if (PV(P_PEER50) <= 0 || PV(P_PEER99) < PV(P_PEER50) ||
             PV(P_STORE50) <= 0 || PV(P_STORE99) < PV(P_STORE50))
        bad = "0 < p50 <= p99 for the peer and the store";
    else if (PV(P_LOCAL) < 0 || PV(P_RTT) < 0 || PV(P_TIMEOUT) <= 0 ||
             PV(P_BACKOFF) < 0 || PV(P_SLOW) < 0 || PV(P_LATSEC) <= 0 ||
             PV(P_WINDOW) < 0)
        bad = "times: not negative (timeout_ms, lat_seconds > 0)";
    if (bad != NULL)
        fprintf(stderr, "groupsim: %s\n", bad);
    return bad == NULL;
}

/* ---- random numbers: splitmix64, and hashes of (a, b, c) ---- */

static uint64_t gs_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t gs_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    return gs_mix(*s);
}

static double gs_unit(uint64_t x)        /* in (0, 1) */
{
    return ((double)(x >> 11) + 0.5) * 0x1p-53;
}

static double gs_u3(uint64_t a, uint64_t b, uint64_t c)
{
    return gs_unit(gs_mix(gs_mix(gs_mix(a) ^ b) ^ c));
}

static double gs_normal(uint64_t *s)
{
    double u1 = gs_unit(gs_next(s));
    double u2 = gs_unit(gs_next(s));

    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A lognormal time with this p50 and p99. */
static double gs_lognormal(uint64_t *s, double p50, double p99)
{
    return p50 * exp(log(p99 / p50) / 2.3263478740 * gs_normal(s));
}

/* ---- the model: members, caches, the sampled blocks ranked ---- */

struct gs_model {
    struct tfs_gmembers g;              /* n readers, then the joiners */
    size_t    n;                        /* members in the first list */
    size_t    m;                        /* n + GS_JOINERS */
    double    wsum;                     /* weights of the first n */
    double   *share;                    /* expected share, first list */
    double   *hit_own;                  /* owner's hit ratio, its blocks */
    double   *pl_group;                 /* local hit, others' blocks */
    double   *pl_alone;                 /* local hit, warm, no group */
    double    miss_sum;                 /* sum of 1 - pl_group, readers */
    double    blocks;                   /* blocks in the dataset */
    double    epoch_s;
    size_t    s;                        /* sampled blocks */
    uint64_t *id;                       /* their block ids */
    uint32_t *top;                      /* s * GS_TOP, best first */
    uint32_t *own0;                     /* owner in the first list */
    uint32_t *own1;                     /* second choice there */
    unsigned char *in0;                 /* the first list, as a view */
};

/* The key a block is placed by (the object and the block's index). */
static size_t gs_key(uint64_t id, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "ds/train-%07llu.tar#%llu",
                     (unsigned long long)(id / 256),
                     (unsigned long long)(id % 256));

    return (size_t)n;
}

static bool gs_usable(void *arg, size_t i)
{
    const unsigned char *in = arg;

    return in[i] != 0;
}

/* The member list: n readers and the joiners, "10.a.b.c:7070 weight". */
static int gs_members(struct gs_model *md, uint64_t seed)
{
    size_t cap = md->m * 40 + 1;
    char *text = malloc(cap);
    size_t len = 0;
    int rc;

    if (text == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < md->m; i++) {
        double w = i < md->n
            ? 1 + (PV(P_SPREAD) - 1) * gs_u3(seed, i, 11)
            : (1 + PV(P_SPREAD)) / 2;
        len += (size_t)snprintf(text + len, cap - len,
                                "10.%u.%u.%u:7070 %.6f\n",
                                (unsigned)(i >> 16), (unsigned)(i >> 8 & 255),
                                (unsigned)(i & 255), w);
    }
    rc = tfs_gmembers_parse(text, len, "groupsim", &md->g);
    free(text);
    return rc;
}

/* Caches (weight-proportional) and the hit ratios they give. */
static void gs_caches(struct gs_model *md)
{
    double d = PV(P_DATASET);

    md->wsum = 0;
    for (size_t i = 0; i < md->n; i++)
        md->wsum += md->g.m[i].weight;
    md->miss_sum = 0;
    for (size_t i = 0; i < md->m; i++) {
        double w = md->g.m[i].weight;
        double c = PV(P_CACHE) * w * (double)md->n / md->wsum;
        double own = i < md->n ? d * w / md->wsum
                               : d * w / (md->wsum + w);
        double room = c > own ? c - own : 0;

        md->share[i] = i < md->n ? w / md->wsum : 0;
        md->hit_own[i] = c >= own ? 1 : c / own;
        md->pl_group[i] = d > own ? fmin(1, room / (d - own)) : 1;
        md->pl_alone[i] = fmin(1, c / d);
        if (i < md->n)
            md->miss_sum += 1 - md->pl_group[i];
    }
}

/* The owner of sampled block b in view in (the real code, when all of
 * its top GS_TOP are out of the view); GS_NONE for an empty view. */
static uint32_t gs_owner(const struct gs_model *md, size_t b,
                         const unsigned char *in)
{
    const uint32_t *t = md->top + b * GS_TOP;
    char key[64];
    size_t o;

    for (size_t k = 0; k < GS_TOP && t[k] != GS_NONE; k++)
        if (in[t[k]])
            return t[k];
    if (md->m <= GS_TOP)
        return GS_NONE;
    if (tfs_gmembers_rank(&md->g, key, gs_key(md->id[b], key, sizeof(key)),
                          gs_usable, (void *)in, &o, 1) != 1)
        return GS_NONE;
    return (uint32_t)o;
}

/* Work split over threads: fn(arg, lo, hi, thread) for parts of [0, n). */
typedef void gs_work_fn(void *arg, size_t lo, size_t hi, size_t t);

struct gs_job {
    gs_work_fn *fn;
    void       *arg;
    size_t      lo, hi, t;
};

static void *gs_job_run(void *p)
{
    struct gs_job *j = p;

    j->fn(j->arg, j->lo, j->hi, j->t);
    return NULL;
}

static void gs_parallel(gs_work_fn *fn, void *arg, size_t n)
{
    size_t nt = (size_t)PV(P_THREADS);
    struct gs_job job[64];
    pthread_t th[64];
    bool started[64];

    for (size_t t = 0; t < nt; t++) {
        job[t] = (struct gs_job){fn, arg, n * t / nt, n * (t + 1) / nt, t};
        started[t] = pthread_create(&th[t], NULL, gs_job_run, &job[t]) == 0;
        if (!started[t])
            gs_job_run(&job[t]);        /* no thread: run it here */
    }
    for (size_t t = 0; t < nt; t++)
        if (started[t])
            pthread_join(th[t], NULL);
}

static void gs_rank_part(void *arg, size_t lo, size_t hi, size_t t)
{
    struct gs_model *md = arg;
    size_t order[GS_TOP];
    char key[64];

    (void)t;
    for (size_t b = lo; b < hi; b++) {
        size_t len = gs_key(md->id[b], key, sizeof(key));
        size_t k = tfs_gmembers_rank(&md->g, key, len, NULL, NULL, order,
                                     GS_TOP);

        for (size_t i = 0; i < GS_TOP; i++)
            md->top[b * GS_TOP + i] = i < k ? (uint32_t)order[i] : GS_NONE;
    }
}

/* Sample, rank, and note each block's owner and second choice. */
static int gs_model_build(struct gs_model *md)
{
    uint64_t seed = (uint64_t)PV(P_SEED);
    uint64_t rs = seed * 7919;
    int rc;

    md->n = (size_t)PV(P_NODES);
    md->m = md->n + GS_JOINERS;
    md->s = (size_t)PV(P_SAMPLE);
    md->blocks = ceil(PV(P_DATASET) / PV(P_BLOCK));
    md->epoch_s = PV(P_DATASET) / PV(P_RATE);
    md->share = calloc(md->m, sizeof(double));
    md->hit_own = calloc(md->m, sizeof(double));
    md->pl_group = calloc(md->m, sizeof(double));
    md->pl_alone = calloc(md->m, sizeof(double));
    md->in0 = calloc(md->m, 1);
    md->id = calloc(md->s, sizeof(uint64_t));
    md->top = calloc(md->s * GS_TOP, sizeof(uint32_t));
    md->own0 = calloc(md->s, sizeof(uint32_t));
    md->own1 = calloc(md->s, sizeof(uint32_t));
    if (!md->share || !md->hit_own || !md->pl_group || !md->pl_alone ||
        !md->in0 || !md->id || !md->top || !md->own0 || !md->own1)
        return -ENOMEM;
    rc = gs_members(md, seed);
    if (rc < 0)
        return rc;
    gs_caches(md);
    memset(md->in0, 1, md->n);
    for (size_t b = 0; b < md->s; b++)
        md->id[b] = gs_next(&rs) % (uint64_t)md->blocks;
    gs_parallel(gs_rank_part, md, md->s);
    for (size_t b = 0; b < md->s; b++) {
        const uint32_t *t = md->top + b * GS_TOP;
        size_t k = 0;

        md->own0[b] = gs_owner(md, b, md->in0);
        md->own1[b] = GS_NONE;
        while (k < GS_TOP && t[k] != GS_NONE &&
               (t[k] >= md->n || t[k] == md->own0[b]))
            k++;
        if (k < GS_TOP && t[k] != GS_NONE)
            md->own1[b] = t[k];
    }
    return 0;
}

static void gs_model_cleanup(struct gs_model *md)
{
    tfs_gmembers_cleanup(&md->g);
    free(md->share);
    free(md->hit_own);
    free(md->pl_group);
    free(md->pl_alone);
    free(md->in0);
    free(md->id);
    free(md->top);
    free(md->own0);
    free(md->own1);
}

/* ---- checks ---- */

static unsigned gs_failed;
static bool gs_checking;

static void gs_check(const char *name, bool ok, const char *fmt, ...)
    TFS_PRINTF(3, 4);

static void gs_check(const char *name, bool ok, const char *fmt, ...)
{
    va_list ap;

    if (!gs_checking)
        return;
    printf("check %-24s %s  ", name, ok ? "ok  " : "FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    gs_failed += !ok;
}

/* ---- shares, fan-in, blocks moved ---- */

/* Requests a block's owner o gets from the other readers (their local
 * misses), per epoch. */
static double gs_others(const struct gs_model *md, uint32_t o)
{
    return o < md->n ? md->miss_sum - (1 - md->pl_group[o]) : md->miss_sum;
}

/* Expected max/mean of x_i = count_i * r_i over the members when count
 * is multinomial over `blocks` draws with md->share (normal approx.). */
static double gs_maxmean_pred(const struct gs_model *md, double blocks,
                              bool per_weight)
{
    uint64_t rs = 12345;
    double acc = 0;
    const int trials = 200;

    for (int k = 0; k < trials; k++) {
        double sum = 0, max = 0;

        for (size_t i = 0; i < md->n; i++) {
            double p = md->share[i];
            double c = blocks * p + sqrt(blocks * p * (1 - p)) *
                       gs_normal(&rs);
            double x = c * gs_others(md, (uint32_t)i) /
                       (per_weight ? md->g.m[i].weight : 1);

            sum += x;
            max = fmax(max, x);
        }
        acc += max / (sum / (double)md->n);
    }
    return acc / trials;
}

/* Owned counts in the sample: the dispersion of (count - s p) / sd. */
static void gs_report_shares(const struct gs_model *md, const double *cnt)
{
    double z2 = 0, zmax = 0, n = (double)md->n, s = (double)md->s;

    for (size_t i = 0; i < md->n; i++) {
        double p = md->share[i];
        double z = (cnt[i] - s * p) / sqrt(s * p * (1 - p));

        z2 += z * z;
        zmax = fmax(zmax, fabs(z));
    }
    z2 /= n;
    printf("shares: sampled owned counts vs weight shares: dispersion "
           "%.3f (1 = binomial), max |z| %.2f\n", z2, zmax);
    gs_check("shares_follow_weights",
             fabs(z2 - 1) <= 5 * sqrt(2 / n) + 0.02 &&
             zmax < 3.2 + sqrt(2 * log(n)),
             "dispersion %.3f within 1 +- %.3f, max |z| %.2f", z2,
             5 * sqrt(2 / n) + 0.02, zmax);
}

/* Per-peer fan-in: requests each member serves per epoch. */
static void gs_report_fanin(const struct gs_model *md, const double *cnt)
{
    double scale = md->blocks / (double)md->s;
    double sum = 0, max = 0, wsum = 0, wmax = 0, n = (double)md->n;

    for (size_t i = 0; i < md->n; i++) {
        double x = cnt[i] * scale * gs_others(md, (uint32_t)i);

        sum += x;
        max = fmax(max, x);
        wsum += x / md->g.m[i].weight;
        wmax = fmax(wmax, x / md->g.m[i].weight);
    }
    printf("\nper-peer fan-in (block requests a member serves per epoch; "
           "the same cold or warm)\n");
    printf("  mean %.4g  max %.4g  max/mean %.3f   per unit of weight: "
           "max/mean %.3f\n", sum / n, max, max / (sum / n),
           wmax / (wsum / n));
    printf("  binomial model: max/mean %.3f in a sample of %zu blocks, "
           "%.4f at the full %.0f blocks\n  (per unit of weight: %.3f, "
           "%.4f); a mean peer serves %.3g TB per epoch\n",
           gs_maxmean_pred(md, (double)md->s, false), md->s,
           gs_maxmean_pred(md, md->blocks, false), md->blocks,
           gs_maxmean_pred(md, (double)md->s, true),
           gs_maxmean_pred(md, md->blocks, true),
           sum / n * PV(P_BLOCK) / 1e12);
}

/* Blocks moved when member `who` (index into g) comes or goes. */
static double gs_moved(const struct gs_model *md, uint32_t who, bool join,
                       size_t *bad)
{
    unsigned char *in = malloc(md->m);
    size_t moved = 0;

    if (in == NULL)
        return NAN;
    memcpy(in, md->in0, md->m);
    in[who] = join;
    for (size_t b = 0; b < md->s; b++) {
        uint32_t o = gs_owner(md, b, in);

        if (o == md->own0[b])
            continue;
        moved++;
        /* a leave moves only the leaver's, to their second choice; a
         * join moves blocks only to the joiner */
        if (join ? o != who : md->own0[b] != who || o != md->own1[b])
            (*bad)++;
    }
    free(in);
    return (double)moved / (double)md->s;
}

/* The first GS_XCHECK blocks ranked again by the real code in a view,
 * against gs_owner; returns the mismatches. */
static size_t gs_xcheck(const struct gs_model *md, const unsigned char *in)
{
    size_t bad = 0, n = md->s < GS_XCHECK ? md->s : GS_XCHECK;
    char key[64];

    for (size_t b = 0; b < n; b++) {
        size_t o = SIZE_MAX;
        size_t len = gs_key(md->id[b], key, sizeof(key));

        tfs_gmembers_rank(&md->g, key, len, gs_usable, (void *)in, &o, 1);
        bad += o != gs_owner(md, b, in);
    }
    return bad;
}

static void gs_report_moves(const struct gs_model *md, const double *cnt,
                            uint32_t leaver)
{
    double n = (double)md->n, s = (double)md->s, max = 0, jsum = 0;
    double jexp = 0;
    size_t bad = 0, xbad = gs_xcheck(md, md->in0);
    double leave = gs_moved(md, leaver, false, &bad);
    unsigned char *in = malloc(md->m);

    for (size_t i = 0; i < md->n; i++)
        max = fmax(max, cnt[i] / s);
    for (uint32_t j = 0; j < GS_JOINERS; j++) {
        double w = md->g.m[md->n + j].weight;

        jsum += gs_moved(md, (uint32_t)md->n + j, true, &bad);
        jexp += w / (md->wsum + w);
    }
    if (in != NULL) {
        memcpy(in, md->in0, md->m);
        in[leaver] = 0;
        xbad += gs_xcheck(md, in);
        in[leaver] = 1;
        in[md->n] = 1;
        xbad += gs_xcheck(md, in);
        free(in);
    }
    jsum /= GS_JOINERS;
    jexp /= GS_JOINERS;
    printf("\nblocks moved by one membership change (fraction of all "
           "blocks)\n");
    printf("  a member leaves: %.5f (its share %.5f; 1/N = %.5f; the "
           "largest share %.5f)\n", leave, md->share[leaver], 1 / n, max);
    printf("  a member joins:  %.5f (mean of %d joins; expected %.5f; "
           "1/(N+1) = %.5f)\n", jsum, GS_JOINERS, jexp, 1 / (n + 1));
    printf("  sampling error (1 sd): %.5f for one leave, %.5f for the "
           "mean join\n", sqrt(md->share[leaver] / s),
           sqrt(jexp / s / GS_JOINERS));
    gs_check("rank_views_agree", xbad == 0, "%zu of %d blocks x 3 views "
             "differ from tfs_gmembers_rank", xbad, GS_XCHECK);
    gs_check("moves_only_changed", bad == 0, "%zu blocks moved elsewhere "
             "than from the leaver / to the joiner", bad);
    gs_check("leave_moves_its_share", fabs(leave - md->share[leaver]) <=
             4 * sqrt(md->share[leaver] / s) + 1e-9,
             "%.5f vs %.5f", leave, md->share[leaver]);
    gs_check("join_takes_its_share", fabs(jsum - jexp) <=
             4 * sqrt(jexp / s / GS_JOINERS) + 1e-9,
             "%.5f vs %.5f", jsum, jexp);
}

/* ---- store egress per epoch, with changes seen at different times ---- */

struct gs_change {
    double   t_s;                       /* when it happens, in the epoch */
    uint32_t who;                       /* member index */
    bool     join;
};

struct gs_scen {
    const char      *name;
    size_t           nch;
    struct gs_change ch[GS_CHANGES_MAX];
    unsigned char   *touched;           /* m: members some change names */
};

struct gs_egress {
    const struct gs_model *md;
    const struct gs_scen  *sc;
    bool    warm;
    double  sum[64], sq[64];            /* store fetches, per thread */
    double  req[64];                    /* requests at owners */
    double *own;                        /* cnt, owned blocks (NULL: no) */
};

/* Store fetches by an owner asked r times (its own read counted),
 * its blocks' hit ratio h, held: it had the block when the epoch began
 * (the owner's cache behaves as LRU under independent requests). */
static double gs_fetches(double r, bool held, double h)
{
    if (r <= 0)
        return 0;
    return held ? r * (1 - h) : 1 + (r - 1) * (1 - h);
}

/* Whether node i sees member x in its list at time t (seconds). */
static bool gs_in_view(const struct gs_model *md, const struct gs_scen *sc,
                       size_t i, uint32_t x, double t)
{
    bool in = x < md->n;

    for (size_t c = 0; c < sc->nch; c++) {
        if (sc->ch[c].who != x)
            continue;
        if (sc->ch[c].t_s + PV(P_WINDOW) * gs_u3(i, c, 2) <= t)
            in = sc->ch[c].join;
    }
    return in;
}

/* The owner node i asks for block b at time t. */
static uint32_t gs_asked(const struct gs_model *md, const struct gs_scen *sc,
                         size_t b, size_t i, double t)
{
    const uint32_t *top = md->top + b * GS_TOP;

    for (size_t k = 0; k < GS_TOP && top[k] != GS_NONE; k++)
        if (!sc->touched[top[k]] ? top[k] < md->n
                                 : gs_in_view(md, sc, i, top[k], t))
            return top[k];
    return md->own0[b];             /* beyond the top: as the first list */
}

/* Block b with views that differ: every reader read at its own time. */
static double gs_block_slow(const struct gs_egress *e, size_t b, double *r)
{
    const struct gs_model *md = e->md;
    uint32_t own[GS_CHANGES_MAX + 2];
    double cnt[GS_CHANGES_MAX + 2];
    size_t k = 0;
    double f = 0;

    for (size_t i = 0; i < md->n; i++) {
        double t = md->epoch_s * gs_u3(md->id[b], i, 1 + e->warm);
        uint32_t o = gs_asked(md, e->sc, b, i, t);
        size_t j = 0;

        if (o != i && gs_u3(md->id[b], i, 3) < md->pl_group[i])
            continue;                   /* a local hit */
        while (j < k && own[j] != o)
            j++;
        if (j == k && k < TFS_ARRAY_LEN(own)) {
            own[k] = o;
            cnt[k++] = 0;
        }
        cnt[j < k ? j : k - 1] += 1;
    }
    *r = 0;
    for (size_t j = 0; j < k; j++) {
        f += gs_fetches(cnt[j], e->warm && own[j] == md->own0[b],
                        md->hit_own[own[j]]);
        *r += cnt[j];
    }
    return f;
}

/* Whether every view of the scenario gives b the first list's owner. */
static bool gs_block_fast(const struct gs_model *md, const struct gs_scen *sc,
                          size_t b)
{
    const uint32_t *top = md->top + b * GS_TOP;

    for (size_t k = 0; k < GS_TOP && top[k] != GS_NONE; k++) {
        if (sc->touched[top[k]])
            return false;
        if (top[k] < md->n)
            return true;
    }
    return false;
}

static void gs_egress_part(void *arg, size_t lo, size_t hi, size_t t)
{
    struct gs_egress *e = arg;
    const struct gs_model *md = e->md;

    for (size_t b = lo; b < hi; b++) {
        uint32_t o = md->own0[b];
        double r = 1 + gs_others(md, o), f;

        if (gs_block_fast(md, e->sc, b))
            f = gs_fetches(r, e->warm, md->hit_own[o]);
        else
            f = gs_block_slow(e, b, &r);
        e->sum[t] += f;
        e->sq[t] += f * f;
        e->req[t] += r;
    }
}

struct gs_epoch {
    double copies;                      /* store bytes / dataset */
    double se;                          /* its sampling error (1 sd) */
    double group_hit;                   /* owner requests not fetched */
};

static struct gs_epoch gs_epoch_run(const struct gs_model *md,
                                    const struct gs_scen *sc, bool warm)
{
    struct gs_egress *e = calloc(1, sizeof(*e));
    double sum = 0, sq = 0, req = 0, s = (double)md->s, mean, var;
    struct gs_epoch out = {NAN, NAN, NAN};

    if (e == NULL)
        return out;
    e->md = md;
    e->sc = sc;
    e->warm = warm;
    gs_parallel(gs_egress_part, e, md->s);
    for (size_t t = 0; t < 64; t++) {
        sum += e->sum[t];
        sq += e->sq[t];
        req += e->req[t];
    }
    mean = sum / s;
    var = fmax(0, sq / s - mean * mean);
    out.copies = mean;                  /* GETs per block of the dataset */
    out.se = sqrt(var / s);
    out.group_hit = 1 - sum / req;
    free(e);
    return out;
}

/* Without the group every node reads its local misses from the store. */
static double gs_alone_copies(const struct gs_model *md, bool warm)
{
    double r = 0;

    for (size_t i = 0; i < md->n; i++)
        r += warm ? 1 - md->pl_alone[i] : 1;
    return r;
}

static void gs_epoch_line(const char *what, double copies, double se)
{
    double blocks = ceil(PV(P_DATASET) / PV(P_BLOCK));

    printf("  %-22s %12.4g %10.4g %10.4f", what, copies * blocks,
           copies * blocks * PV(P_BLOCK) / 1e12, copies);
    if (se > 0)
        printf(" +- %.4f", 2 * se);
    printf("\n");
}

static void gs_report_egress(const struct gs_model *md,
                             const struct gs_scen *none)
{
    struct gs_epoch cold = gs_epoch_run(md, none, false);
    struct gs_epoch warm = gs_epoch_run(md, none, true);
    double a_cold = gs_alone_copies(md, false);
    double a_warm = gs_alone_copies(md, true);
    double hmin = 1;

    for (size_t i = 0; i < md->n; i++)
        hmin = fmin(hmin, md->hit_own[i]);
    printf("\nstore egress per epoch (GETs: block requests; copies: GETs "
           "/ blocks in the dataset;\n +- two sampling sd)\n");
    printf("  %-22s %12s %10s %10s\n", "", "GETs", "TB", "copies");
    gs_epoch_line("cold, without group", a_cold, 0);
    gs_epoch_line("cold, with group", cold.copies, cold.se);
    gs_epoch_line("warm, without group", a_warm, 0);
    gs_epoch_line("warm, with group", warm.copies, warm.se);
    printf("  group hit ratio (requests to owners answered without a "
           "store GET): cold %.5f, warm %.5f\n", cold.group_hit,
           warm.group_hit);
    printf("  local hit ratio of a reader: %.5f with the group (others' "
           "blocks), %.5f warm without\n", md->pl_group[0],
           md->pl_alone[0]);
    if (hmin < 1)
        printf("  (the caches hold less than the members' shares: an owner "
               "hits %.3f of requests\n   for its blocks; the group holds "
               "one copy only when each cache >= its share)\n", hmin);
    gs_check("egress_alone_n_copies",
             fabs(a_cold - (double)md->n) < 1e-6 * (double)md->n,
             "cold epoch %.1f copies for %zu nodes", a_cold, md->n);
    if (hmin < 1)
        return;
    gs_check("egress_group_one_copy",
             fabs(cold.copies - 1) <= 3 * cold.se + 1e-9,
             "cold epoch %.4f copies", cold.copies);
    gs_check("egress_group_warm_none", warm.copies < 1e-9,
             "warm epoch %.4f copies", warm.copies);
}

/* The scenarios: none, one leave, one join, ten (five of each). */
static int gs_scens(const struct gs_model *md, struct gs_scen *sc,
                    uint32_t *leaver)
{
    uint64_t rs = (uint64_t)PV(P_SEED) * 31 + 5;
    static const char *names[] = {"no change", "1 leave", "1 join",
                                  "10 changes (5+5)"};

    for (size_t k = 0; k < 4; k++) {
        sc[k].name = names[k];
        sc[k].touched = calloc(md->m, 1);
        if (sc[k].touched == NULL)
            return -ENOMEM;
    }
    *leaver = (uint32_t)(gs_next(&rs) % md->n);
    sc[1].nch = 1;
    sc[1].ch[0] = (struct gs_change){md->epoch_s / 2, *leaver, false};
    sc[2].nch = 1;
    sc[2].ch[0] = (struct gs_change){md->epoch_s / 2, (uint32_t)md->n,
                                     true};
    for (size_t c = 0; c < GS_CHANGES_MAX && md->n > 2 * GS_CHANGES_MAX;
         c++) {
        uint32_t who = c % 2 ? (uint32_t)(md->n + c / 2)
                             : (uint32_t)(gs_next(&rs) % md->n);

        while (c % 2 == 0 && sc[3].touched[who])
            who = (who + 1) % (uint32_t)md->n;
        sc[3].ch[c] = (struct gs_change){
            md->epoch_s * gs_unit(gs_next(&rs)), who, c % 2 == 1};
        sc[3].touched[who] = 1;
    }
    sc[3].nch = md->n > 2 * GS_CHANGES_MAX ? GS_CHANGES_MAX : 0;
    for (size_t k = 1; k < 3; k++)
        sc[k].touched[sc[k].ch[0].who] = 1;
    return 0;
}

static void gs_report_churn(const struct gs_model *md,
                            const struct gs_scen *sc)
{
    struct gs_epoch base[2], e[2];
    double maxsh = 0;

    for (size_t i = 0; i < md->n; i++)
        maxsh = fmax(maxsh, md->share[i]);
    printf("\nmembership changes seen at different times (each node "
           "within %.0f s of a change;\n epoch %.0f s; a leaver answers "
           "until every node has seen it go)\n", PV(P_WINDOW),
           md->epoch_s);
    printf("  %-18s %18s %8s %22s\n", "", "cold epoch copies", "factor",
           "warm epoch copies");
    base[0] = gs_epoch_run(md, &sc[0], false);
    base[1] = gs_epoch_run(md, &sc[0], true);
    for (size_t k = 0; k < 4; k++) {
        if (sc[k].nch == 0 && k > 0)
            continue;
        e[0] = k ? gs_epoch_run(md, &sc[k], false) : base[0];
        e[1] = k ? gs_epoch_run(md, &sc[k], true) : base[1];
        printf("  %-18s %10.5f +- %.5f %8.5f %12.5f +- %.5f\n", sc[k].name,
               e[0].copies, 2 * e[0].se, e[0].copies / base[0].copies,
               e[1].copies, 2 * e[1].se);
        if (k == 0)
            continue;
        gs_check(k == 3 ? "churn_10_overhead" : "churn_1_overhead",
                 e[0].copies >= base[0].copies - 3 * e[0].se &&
                 e[0].copies <= base[0].copies +
                 2.0 * (double)sc[k].nch * maxsh + 3 * e[0].se,
                 "%s: cold %.5f copies, at most %.5f", sc[k].name,
                 e[0].copies, base[0].copies +
                 2.0 * (double)sc[k].nch * maxsh);
    }
}

/* ---- latency of a block fetch, one slow peer ---- */

enum {
    M_ALONE,                            /* no group: local or the store */
    M_HEALTHY,                          /* the group, no slow peer */
    M_WAIT,                             /* slow peer, no timeout */
    M_TIMEOUT,                          /* timeout T, no suspect marks */
    M_SUSPECT,                          /* timeout T and back-off B */
    M_NMODES
};

static const char *gs_mode_name[M_NMODES] = {
    "no group", "group, all healthy", "slow peer, no timeout",
    "slow peer, timeout T", "slow peer, T + suspect B",
};

struct gs_lacc {
    uint64_t hist[M_NMODES][2][GS_BINS]; /* all reads; the slow's blocks */
    uint64_t n[M_NMODES][2];
    uint64_t timeouts[M_NMODES];        /* attempts cut by T */
    uint64_t false_to[M_NMODES];        /* ...of a healthy peer */
    uint64_t store[M_NMODES];           /* store GETs */
};

struct gs_lat {
    const struct gs_model *md;
    bool            cold;
    uint32_t        slow;
    struct gs_lacc *acc[64];
};

/* One request's random draws, shared by every mode. */
struct gs_draw {
    double peer1, peer2;                /* RTT + service, ms */
    double store1, store2;              /* store GETs, ms */
    bool   miss1, miss2;                /* owner / fallback lacks it */
    bool   local_g, local_a;            /* local hit: group, alone */
};

struct gs_req {
    const struct gs_lat *lt;
    size_t   node;
    uint32_t o1, o2;
    double   now_s;
    int      mode;
    double  *sus;                       /* suspect until, per member */
    struct gs_lacc *acc;
};

/* An attempt at peer o: t_ms to its answer, fetch_ms more when it
 * fetches from the store on its miss.  Its time, or -1 when T cut it
 * (marking o suspect when the mode does).  Unless timeout_covers_miss,
 * an owner that fetches says so at once and T does not cut its GET. */
static double gs_try(struct gs_req *q, uint32_t o, double t_ms,
                     double fetch_ms)
{
    double cut;

    if (q->lt->slow == o && q->mode >= M_WAIT)
        t_ms += PV(P_SLOW);
    cut = PV(P_TOMISS) != 0 ? t_ms + fetch_ms : t_ms;
    if (q->mode == M_WAIT || cut <= PV(P_TIMEOUT))
        return t_ms + fetch_ms;
    q->acc->timeouts[q->mode]++;
    q->acc->false_to[q->mode] += o != q->lt->slow || q->mode == M_HEALTHY;
    if (q->sus != NULL)
        q->sus[o] = q->now_s + PV(P_BACKOFF);
    return -1;
}

static bool gs_suspect(const struct gs_req *q, uint32_t o)
{
    return q->sus != NULL && q->sus[o] > q->now_s;
}

/* A read through the group: the owner, then the next member or the
 * store (docs/group.md). */
static double gs_read_group(struct gs_req *q, const struct gs_draw *d)
{
    /* the next member holds the slow peer's blocks once the first reader
     * fell back to it; a healthy owner's blocks it does not hold */
    bool miss2 = q->mode < M_WAIT || q->o1 != q->lt->slow || d->miss2;
    double t, spent = 0;

    if (q->o1 == q->node || d->local_g) {
        q->acc->store[q->mode] += q->o1 == q->node && d->miss1;
        return PV(P_LOCAL) + (q->o1 == q->node && d->miss1 ? d->store1 : 0);
    }
    if (!gs_suspect(q, q->o1)) {
        t = gs_try(q, q->o1, d->peer1, d->miss1 ? d->store1 : 0);
        q->acc->store[q->mode] += d->miss1;
        if (t >= 0)
            return t;
        spent = PV(P_TIMEOUT);
    }
    if (PV(P_FBSTORE) == 0 && q->o2 == q->node) {
        q->acc->store[q->mode] += miss2;        /* this node is next */
        return spent + PV(P_LOCAL) + (miss2 ? d->store2 : 0);
    }
    if (PV(P_FBSTORE) == 0 && q->o2 != GS_NONE && !gs_suspect(q, q->o2)) {
        t = gs_try(q, q->o2, d->peer2, miss2 ? d->store2 : 0);
        q->acc->store[q->mode] += miss2;
        if (t >= 0)
            return spent + t;
        spent += PV(P_TIMEOUT);
    }
    q->acc->store[q->mode]++;
    return spent + d->store2;
}

static void gs_record(struct gs_lacc *a, int mode, bool slow, double ms)
{
    double x = ms / GS_BIN0_MS;
    int bin = x <= 1 ? 0 : (int)(log(x) / log(1.01));

    if (bin >= GS_BINS)
        bin = GS_BINS - 1;
    for (int k = 0; k < 1 + slow; k++) {
        a->hist[mode][k][bin]++;
        a->n[mode][k]++;
    }
}

static void gs_draw(const struct gs_lat *lt, size_t node, uint32_t o1,
                    uint64_t *rs, struct gs_draw *d)
{
    const struct gs_model *md = lt->md;
    /* cold: the first of the R requests at the owner (its own read
     * counted) misses; the slow peer's next member: the first of the
     * N - 1 other readers falling back to it, in the epoch the peer
     * turned slow */
    double first = 1 / (1 + gs_others(md, o1));
    double fb = 1 / fmax(1, (double)md->n - 1);
    double miss = 1 - md->hit_own[o1];

    d->peer1 = PV(P_RTT) + gs_lognormal(rs, PV(P_PEER50), PV(P_PEER99));
    d->peer2 = PV(P_RTT) + gs_lognormal(rs, PV(P_PEER50), PV(P_PEER99));
    d->store1 = gs_lognormal(rs, PV(P_STORE50), PV(P_STORE99));
    d->store2 = gs_lognormal(rs, PV(P_STORE50), PV(P_STORE99));
    d->miss1 = gs_unit(gs_next(rs)) <
               (lt->cold ? first + (1 - first) * miss : miss);
    d->miss2 = gs_unit(gs_next(rs)) < fb;
    d->local_g = gs_unit(gs_next(rs)) < md->pl_group[node];
    d->local_a = !lt->cold && gs_unit(gs_next(rs)) < md->pl_alone[node];
}

/* One node's reads over lat_seconds, in every mode at once. */
static void gs_lat_node(const struct gs_lat *lt, size_t node,
                        struct gs_lacc *acc, double *sus)
{
    const struct gs_model *md = lt->md;
    double rate = PV(P_RATE) / PV(P_BLOCK);     /* reads per second */
    uint64_t rs = gs_mix((uint64_t)PV(P_SEED) * 1000003 + node);
    struct gs_draw d;

    for (size_t i = 0; i < 2 * md->m; i++)
        sus[i] = 0;
    for (double t = 0; t < PV(P_LATSEC);) {
        size_t b = gs_next(&rs) % md->s;
        struct gs_req q = {lt, node, md->own0[b], md->own1[b], t, 0, NULL,
                           acc};
        bool slow = q.o1 == lt->slow;

        t += -log(gs_unit(gs_next(&rs))) / rate;
        gs_draw(lt, node, q.o1, &rs, &d);
        acc->store[M_ALONE] += !d.local_a;
        gs_record(acc, M_ALONE, slow, d.local_a ? PV(P_LOCAL) : d.store1);
        for (q.mode = M_HEALTHY; q.mode < M_NMODES; q.mode++) {
            q.sus = q.mode == M_HEALTHY ? sus
                    : q.mode == M_SUSPECT ? sus + md->m : NULL;
            gs_record(acc, q.mode, slow, gs_read_group(&q, &d));
        }
    }
}

static void gs_lat_part(void *arg, size_t lo, size_t hi, size_t t)
{
    struct gs_lat *lt = arg;
    double *sus = malloc(2 * lt->md->m * sizeof(double));

    lt->acc[t] = calloc(1, sizeof(struct gs_lacc));
    if (sus == NULL || lt->acc[t] == NULL) {
        free(sus);
        return;
    }
    for (size_t node = lo; node < hi; node++)
        gs_lat_node(lt, node, lt->acc[t], sus);
    free(sus);
}

static double gs_pct(const uint64_t *h, uint64_t n, double q)
{
    uint64_t want = (uint64_t)ceil(q * (double)n), seen = 0;

    for (int b = 0; b < GS_BINS; b++) {
        seen += h[b];
        if (seen >= want && seen > 0)
            return GS_BIN0_MS * pow(1.01, b + 0.5);
    }
    return NAN;
}

/* Merge the threads' sums into acc[0]. */
static bool gs_lat_merge(struct gs_lat *lt)
{
    size_t nt = (size_t)PV(P_THREADS);
    struct gs_lacc *a = lt->acc[0];

    for (size_t t = 0; t < nt; t++)
        if (lt->acc[t] == NULL)
            return false;
    for (size_t t = 1; t < nt; t++) {
        const uint64_t *src = (const uint64_t *)lt->acc[t];
        uint64_t *dst = (uint64_t *)a;

        for (size_t i = 0; i < sizeof(*a) / sizeof(uint64_t); i++)
            dst[i] += src[i];
        free(lt->acc[t]);
    }
    return true;
}

static void gs_lat_row(const struct gs_lacc *a, int mode, double n_nodes,
                       double *p99)
{
    const uint64_t *all = a->hist[mode][0];
    const uint64_t *sl = a->hist[mode][1];
    uint64_t n = a->n[mode][0], ns = a->n[mode][1];

    p99[0] = gs_pct(all, n, 0.99);
    p99[1] = gs_pct(sl, ns, 0.99);
    printf("  %-24s %7.2f %8.2f %8.2f | %8.2f %8.2f | %7.4f%% %7.4f%% "
           "%8.4f\n", gs_mode_name[mode], gs_pct(all, n, 0.5), p99[0],
           gs_pct(all, n, 0.999), gs_pct(sl, ns, 0.5), p99[1],
           100.0 * (double)a->timeouts[mode] / (double)n,
           100.0 * (double)a->false_to[mode] / (double)n,
           n_nodes * (double)a->store[mode] / (double)n);
}

static int gs_report_lat(const struct gs_model *md, bool cold)
{
    struct gs_lat lt = {md, cold, 0, {NULL}};
    double p99[M_NMODES][2];
    uint64_t rs = (uint64_t)PV(P_SEED) * 77 + 1;

    lt.slow = (uint32_t)(gs_next(&rs) % md->n);
    gs_parallel(gs_lat_part, &lt, md->n);
    if (!gs_lat_merge(&lt))
        return -ENOMEM;
    printf("\nblock-fetch latency, %s epoch, ms (%llu reads over %.0f s; "
           "one slow peer, %zu, +%.0f ms)\n", cold ? "cold" : "warm",
           (unsigned long long)lt.acc[0]->n[0][0], PV(P_LATSEC),
           (size_t)lt.slow, PV(P_SLOW));
    printf("  %-24s %7s %8s %8s | %8s %8s | %8s %8s %8s\n", "", "p50",
           "p99", "p99.9", "slow p50", "slow p99", "cut", "falsecut",
           "copies");
    for (int mode = 0; mode < M_NMODES; mode++)
        gs_lat_row(lt.acc[0], mode, (double)md->n, p99[mode]);
    printf("  (all reads, then the reads of the slow peer's blocks; cut: "
           "attempts cut by T,\n   falsecut: of a healthy peer; copies: "
           "store GETs per read x N, the store\n   egress per epoch in "
           "dataset copies at this rate)\n");
    if (!cold && PV(P_SLOW) > PV(P_TIMEOUT) + 4 * PV(P_PEER99)) {
        gs_check("lat_timeout_cuts_slow", p99[M_TIMEOUT][1] <
                 p99[M_WAIT][1], "slow blocks' p99 %.1f ms < %.1f ms",
                 p99[M_TIMEOUT][1], p99[M_WAIT][1]);
        gs_check("lat_suspect_helps", p99[M_SUSPECT][1] <=
                 p99[M_TIMEOUT][1] * 1.02, "slow blocks' p99 %.1f ms <= "
                 "%.1f ms", p99[M_SUSPECT][1], p99[M_TIMEOUT][1]);
    }
    free(lt.acc[0]);
    return 0;
}

/* ---- every block of the dataset: exact owned counts ---- */

struct gs_exact {
    const struct gs_model *md;
    double *cnt[64];
};

static void gs_exact_part(void *arg, size_t lo, size_t hi, size_t t)
{
    struct gs_exact *x = arg;
    const struct gs_model *md = x->md;
    char key[64];

    x->cnt[t] = calloc(md->m, sizeof(double));
    if (x->cnt[t] == NULL)
        return;
    for (size_t id = lo; id < hi; id++) {
        size_t o = 0;
        size_t len = gs_key(id, key, sizeof(key));

        tfs_gmembers_rank(&md->g, key, len, gs_usable, md->in0, &o, 1);
        x->cnt[t][o]++;
    }
}

static void gs_report_exact(const struct gs_model *md)
{
    struct gs_exact x = {md, {NULL}};
    double sum = 0, max = 0, min = INFINITY, n = (double)md->n;

    gs_parallel(gs_exact_part, &x, (size_t)md->blocks);
    for (size_t t = 1; t < (size_t)PV(P_THREADS); t++)
        for (size_t i = 0; i < md->n && x.cnt[t] && x.cnt[0]; i++)
            x.cnt[0][i] += x.cnt[t][i];
    if (x.cnt[0] == NULL)
        return;
    for (size_t i = 0; i < md->n; i++) {
        double f = x.cnt[0][i] * gs_others(md, (uint32_t)i) /
                   md->g.m[i].weight;

        sum += f;
        max = fmax(max, f);
        min = fmin(min, f);
    }
    printf("\nexact, every one of the %.0f blocks ranked: fan-in per unit "
           "of weight max/mean %.4f, min/mean %.4f\n", md->blocks,
           max / (sum / n), min / (sum / n));
    for (size_t t = 0; t < (size_t)PV(P_THREADS); t++)
        free(x.cnt[t]);
}

/* ---- main ---- */

static double gs_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Options; returns 0, or the exit status for a usage error. */
static int gs_args(int argc, char **argv, bool *exact)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (strcmp(a, "--check") == 0) {
            gs_checking = true;
        } else if (strcmp(a, "--exact-owners") == 0) {
            *exact = true;
        } else if (strcmp(a, "--calib") == 0 && i + 1 < argc) {
            if (gs_calib(argv[++i]) < 0)
                return 2;
        } else if (strncmp(a, "--", 2) == 0 && i + 1 < argc &&
                   gs_set(a + 2, argv[i + 1], "argv") == 0) {
            i++;
        } else {
            if (strcmp(a, "--help") != 0)
                fprintf(stderr, "groupsim: bad option or value: %s\n", a);
            gs_usage();
            return 2;
        }
    }
    return gs_par_ok() ? 0 : 2;
}

static void gs_print_params(const struct gs_model *md)
{
    printf("groupsim: %zu nodes, %.4g TB in %.0f blocks of %.0f bytes, a "
           "sample of %zu blocks (1 in %.0f)\nparameters:\n", md->n,
           PV(P_DATASET) / 1e12, md->blocks, PV(P_BLOCK), md->s,
           md->blocks / (double)md->s);
    for (size_t i = 0; i < P_NPAR; i++)
        printf("  %-18s %-14.10g %-8s %s\n", gs_par[i].name, gs_par[i].v,
               gs_par[i].src, gs_par[i].what);
}

/* Every report, in order; -ENOMEM. */
static int gs_run(struct gs_model *md, struct gs_scen *sc, uint32_t leaver,
                  bool exact)
{
    double *cnt = calloc(md->m, sizeof(double));
    int rc = 0;

    if (cnt == NULL)
        return -ENOMEM;
    for (size_t b = 0; b < md->s; b++)
        cnt[md->own0[b]]++;
    gs_report_shares(md, cnt);
    gs_report_egress(md, &sc[0]);
    gs_report_fanin(md, cnt);
    gs_report_moves(md, cnt, leaver);
    gs_report_churn(md, sc);
    if (gs_report_lat(md, false) < 0 || gs_report_lat(md, true) < 0)
        rc = -ENOMEM;
    if (rc == 0 && exact)
        gs_report_exact(md);
    free(cnt);
    return rc;
}

int main(int argc, char **argv)
{
    struct gs_model md = {0};
    struct gs_scen sc[4] = {{0}};
    double t0 = gs_now_s();
    bool exact = false;
    uint32_t leaver = 0;
    int rc = gs_args(argc, argv, &exact);

    if (rc != 0)
        return rc;
    rc = gs_model_build(&md);
    if (rc == 0)
        rc = gs_scens(&md, sc, &leaver);
    if (rc == 0) {
        gs_print_params(&md);
        printf("ranked in %.1f s; epoch %.0f s (dataset / read rate)\n",
               gs_now_s() - t0, md.epoch_s);
        rc = gs_run(&md, sc, leaver, exact);
    }
    for (size_t k = 0; k < TFS_ARRAY_LEN(sc); k++)
        free(sc[k].touched);
    gs_model_cleanup(&md);
    if (rc < 0) {
        fprintf(stderr, "groupsim: %s\n", tfs_strerror(rc));
        return 1;
    }
    printf("\ngroupsim: done in %.1f s%s\n", gs_now_s() - t0,
           !gs_checking ? "" : gs_failed ? ", checks FAILED" :
           ", all checks ok");
    return gs_failed ? 1 : 0;
}
