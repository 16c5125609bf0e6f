/* SPDX-License-Identifier: MIT */
/*
 * tierfs stats [-w SECONDS] [--json] MOUNTPOINT: the counters of a
 * mounted cache, read from its control file MOUNTPOINT/.tierfs-stats.
 *
 * The file holds one JSON object (docs/metrics.md), parsed with
 * common/json.c and flattened here into (name, number) pairs, nested
 * members as "fuse.reads", so the table shows whatever figures the
 * running version emits, in its order.  Its "meta" member gives each
 * figure's type and unit (the metrics registry's, written with the
 * numbers), which choose the format and whether -w shows a rate: the
 * per-second rate of each counter.  A figure meta does not name (a
 * daemon older than meta) shows as a plain number without a rate.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/json.h"
#include "common/util.h"

#define STATS_MAX_FIELDS 256
#define STATS_NAME_MAX 96
#define STATS_TEXT_MAX (4u << 20)
#define STATS_DEPTH_MAX 8

/* Units as "meta" spells them (metrics/metrics.h, docs/metrics.md). */
enum stats_unit {
    STATS_PLAIN,                        /* "count", "none", or unknown */
    STATS_BYTES,
    STATS_BYTES_PER_S,
    STATS_SECONDS,
    STATS_US,
    STATS_NS,
};

struct stats_field {
    char            name[STATS_NAME_MAX];
    double          v;
    bool            counter;            /* -w shows its rate */
    enum stats_unit unit;
};

struct stats_set {
    struct stats_field f[STATS_MAX_FIELDS];
    size_t             n;
    uint64_t           t_ns;            /* when it was read */
};

static volatile sig_atomic_t stats_stop;

static void stats_help(FILE *f)
{
    fprintf(f, "usage: tierfs stats [-w SECONDS] [--json] MOUNTPOINT\n\n"
               "Show the cache counters of a tierfs mount.\n\n"
               "  -w, --watch SECONDS  repeat every SECONDS with rates, "
               "until ^C\n"
               "  --json               the raw JSON object (one per line "
               "with -w)\n");
}

/* ---- flattening the parsed object ---- */

/* What meta says of the figure name: type and unit, for f. */
static void stats_meta(const struct tfs_json *meta, const char *name,
                       struct stats_field *f)
{
    static const struct {
        const char     *name;
        enum stats_unit unit;
    } units[] = {
        {"bytes", STATS_BYTES},     {"bytes_per_second", STATS_BYTES_PER_S},
        {"seconds", STATS_SECONDS}, {"us", STATS_US},
        {"ns", STATS_NS},
    };
    const struct tfs_json *m = tfs_json_get(meta, name);
    const char *type = NULL;
    const char *unit = NULL;
    const char *dot = strchr(name, '.');
    const char *last = strrchr(name, '.');
    char star[STATS_NAME_MAX + 4];

    /* a table section's row: "peers.HOST:PORT.requests" is in meta as
       "peers.*.requests" (its key may hold dots) */
    if (m == NULL && dot != NULL && last != dot) {
        snprintf(star, sizeof(star), "%.*s.*%s", (int)(dot - name), name,
                 last);
        m = tfs_json_get(meta, star);
    }
    f->counter = false;
    f->unit = STATS_PLAIN;
    if (m == NULL || m->type != TFS_JSON_ARRAY || m->n != 2)
        return;
    type = tfs_json_str(m->child);
    unit = tfs_json_str(m->child->next);
    f->counter = type != NULL && strcmp(type, "counter") == 0;
    for (size_t i = 0; unit != NULL && i < TFS_ARRAY_LEN(units); i++) {
        if (strcmp(unit, units[i].name) == 0)
            f->unit = units[i].unit;
    }
}

static int stats_value(const struct tfs_json *v, const char *name,
                       struct stats_set *s, const struct tfs_json *meta,
                       int depth);

/* An object's members, each value flattened under prefix "name." (a
   name cut to STATS_NAME_MAX - 1 bytes, as the names of old); the top
   level's "meta" is not a figure. */
static int stats_object(const struct tfs_json *v, const char *name,
                        struct stats_set *s, const struct tfs_json *meta,
                        int depth)
{
    char full[STATS_NAME_MAX];

    for (const struct tfs_json *m = v->child; m != NULL; m = m->next) {
        if (depth == 0 && strcmp(m->key, "meta") == 0)
            continue;
        if ((size_t)snprintf(full, sizeof(full), "%s%s%.*s", name,
                             name[0] ? "." : "", STATS_NAME_MAX - 1,
                             m->key) >= sizeof(full))
            return -1;                  /* names this long are not ours */
        if (stats_value(m, full, s, meta, depth + 1) < 0)
            return -1;
    }
    return 0;
}

/*
 * Numbers are kept under their dotted name (the first STATS_MAX_FIELDS);
 * strings, booleans and null are skipped, and so are arrays (their
 * numbers are not shown).  -1 past STATS_DEPTH_MAX.
 */
static int stats_value(const struct tfs_json *v, const char *name,
                       struct stats_set *s, const struct tfs_json *meta,
                       int depth)
{
    if (depth > STATS_DEPTH_MAX)
        return -1;
    if (v->type == TFS_JSON_OBJECT)
        return stats_object(v, name, s, meta, depth);
    if (v->type == TFS_JSON_ARRAY) {
        for (const struct tfs_json *e = v->child; e != NULL; e = e->next) {
            if (stats_value(e, "", NULL, NULL, depth + 1) < 0)
                return -1;
        }
        return 0;
    }
    if (v->type == TFS_JSON_NUMBER && s != NULL && s->n < STATS_MAX_FIELDS) {
        struct stats_field *f = &s->f[s->n++];

        snprintf(f->name, STATS_NAME_MAX, "%s", name);
        f->v = strtod(v->s, NULL);
        stats_meta(meta, name, f);
    }
    return 0;
}

static int stats_parse(const char *text, size_t len, struct stats_set *s)
{
    static const struct tfs_json_limits lim = {
        .max_len = STATS_TEXT_MAX,
        .max_depth = STATS_DEPTH_MAX + 1,   /* stats_value checks values */
        .max_nodes = STATS_TEXT_MAX,
        .any_bytes = true,                  /* keys of parked changes */
    };
    struct tfs_json_doc doc;
    int rc;

    s->n = 0;
    rc = tfs_json_parse(text, len, &lim, &doc);
    if (rc == 0 && (doc.root->type != TFS_JSON_OBJECT ||
                    stats_value(doc.root, "", s,
                                tfs_json_get(doc.root, "meta"), 0) < 0))
        rc = TFS_EPROTO;
    tfs_json_cleanup(&doc);
    if (rc < 0)
        return tfs_err(TFS_EPROTO, "the statistics are not a JSON object");
    return 0;
}

static const struct stats_field *stats_find(const struct stats_set *s,
                                            const char *name)
{
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->f[i].name, name) == 0)
            return &s->f[i];
    }
    return NULL;
}

/* ---- reading and printing ---- */

/* The whole control file of mnt into b. */
static int stats_read(const char *mnt, struct tfs_buf *b)
{
    char path[4096];
    char chunk[65536];
    ssize_t n;
    int rc = 0;
    int fd;

    snprintf(path, sizeof(path), "%s/.tierfs-stats", mnt);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return tfs_err(-ENOENT, "not a tierfs mount (no %s)", path);
    if (fd < 0)
        return tfs_err(-errno, "cannot open %s", path);
    tfs_buf_reset(b);
    while (rc == 0 && (n = read(fd, chunk, sizeof(chunk))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        rc = n < 0 ? tfs_err(-errno, "cannot read %s", path)
                   : tfs_buf_append(b, chunk, (size_t)n);
    }
    close(fd);
    return rc;
}

/* v (of f, or its per-second rate) formatted in f's unit. */
static const char *stats_fmt(char *buf, size_t size,
                             const struct stats_field *f, double v,
                             bool rate)
{
    const char *per = rate ? "/s" : "";

    switch (f->unit) {
    case STATS_BYTES:
    case STATS_BYTES_PER_S:
        tfs_fmt_bytes(buf, size, v);
        if (rate || f->unit == STATS_BYTES_PER_S)
            strncat(buf, "/s", size - strlen(buf) - 1);
        break;
    case STATS_SECONDS:
        snprintf(buf, size, "%.3f s%s", v, per);
        break;
    case STATS_US:
        snprintf(buf, size, "%.1f us%s", v, per);
        break;
    case STATS_NS:
        snprintf(buf, size, "%.0f ns%s", v, per);
        break;
    case STATS_PLAIN:
        snprintf(buf, size, rate ? "%.1f/s" : "%.0f", v);
        break;
    }
    return buf;
}

static void stats_print(const char *mnt, const struct stats_set *s,
                        const struct stats_set *prev)
{
    double dt = prev ? (double)(s->t_ns - prev->t_ns) / 1e9 : 0;
    const struct stats_field *rd = stats_find(s, "read_bytes");
    const struct stats_field *ram = stats_find(s, "hit_bytes_ram");
    const struct stats_field *disk = stats_find(s, "hit_bytes_disk");
    char a[48];
    char r[48];

    printf("%s%s\n", prev ? "\n" : "", mnt);
    for (size_t i = 0; i < s->n; i++) {
        const struct stats_field *f = &s->f[i];
        const struct stats_field *p = prev ? stats_find(prev, f->name) : NULL;

        r[0] = '\0';
        if (p != NULL && dt > 0 && f->counter)
            stats_fmt(r, sizeof(r), f, (f->v - p->v) / dt, true);
        printf("  %-32s %16s  %s\n", f->name,
               stats_fmt(a, sizeof(a), f, f->v, false), r);
    }
    if (rd != NULL && ram != NULL && disk != NULL && rd->v > 0)
        printf("  %-32s %14.1f %%\n", "hit ratio",
               100.0 * (ram->v + disk->v) / rd->v);
    fflush(stdout);
}

/* Print the raw JSON, on one line when watching. */
static void stats_print_json(struct tfs_buf *b, bool one_line)
{
    for (size_t i = 0; one_line && i < b->len; i++) {
        if (b->p[i] == '\n')
            b->p[i] = ' ';
    }
    fwrite(b->p, 1, b->len, stdout);
    if (one_line)
        putchar('\n');
    fflush(stdout);
}

static void stats_on_sigint(int sig)
{
    stats_stop = 1;
}

/* Sleep seconds, or less when ^C arrives. */
static void stats_sleep(unsigned seconds)
{
    struct timespec ts = {.tv_sec = seconds};

    while (!stats_stop && nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static int stats_loop(const char *mnt, unsigned watch, bool json)
{
    struct stats_set *s = tfs_calloc(2, sizeof(*s));
    struct tfs_buf b;
    int rc = 0;

    if (s == NULL)
        return -ENOMEM;
    tfs_buf_init(&b, STATS_TEXT_MAX);
    for (unsigned i = 0; rc == 0 && !stats_stop; i++) {
        struct stats_set *cur = &s[i % 2];

        if (i > 0)
            stats_sleep(watch);
        if (stats_stop)
            break;
        rc = stats_read(mnt, &b);
        cur->t_ns = tfs_now_ns();
        if (rc == 0 && json)
            stats_print_json(&b, watch > 0);
        else if (rc == 0)
            rc = stats_parse(tfs_buf_str(&b), b.len, cur);
        if (rc == 0 && !json)
            stats_print(mnt, cur, i > 0 ? &s[(i + 1) % 2] : NULL);
        if (watch == 0)
            break;
    }
    tfs_buf_cleanup(&b);
    tfs_free(s);
    return rc;
}

int cmd_stats(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"watch", required_argument, NULL, 'w'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct sigaction sa = {.sa_handler = stats_on_sigint};
    unsigned watch = 0;
    bool json = false;
    int rc;
    int c;

    while ((c = getopt_long(argc, argv, "w:h", longopts, NULL)) != -1) {
        if (c == 'w' &&
            cli_parse_uint("stats", "-w", optarg, 1, 86400, &watch) != 0)
            return CLI_USAGE;
        if (c == 'j')
            json = true;
        if (c == 'h') {
            stats_help(stdout);
            return CLI_OK;
        }
        if (c == '?') {
            stats_help(stderr);
            return CLI_USAGE;
        }
    }
    if (argc - optind != 1)
        return cli_usage_error("stats", "want MOUNTPOINT");
    if (watch > 0) {
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    rc = stats_loop(argv[optind], watch, json);
    return rc < 0 ? cli_fail("stats", argv[optind], rc) : CLI_OK;
}
