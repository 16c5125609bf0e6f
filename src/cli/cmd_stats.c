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
 *
 * A table section (meta names its figures "section.*.name": the s3
 * store's "endpoints", one row per gateway) is printed after the rest as
 * a table, a line per row, with each row's share of the requests, so a
 * hot gateway shows at a glance; with -w its counters are rates.
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

#define STATS_MAX_FIELDS 2048
#define STATS_NAME_MAX 160
#define STATS_COL_MAX 40
#define STATS_MAX_TABLES 8
#define STATS_MAX_ROWS 256
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
    int             table;              /* index in tables, -1: none */
    int             row;                /* index in rows (of a table) */
    char            col[STATS_COL_MAX]; /* its name in the row */
};

struct stats_set {
    struct stats_field f[STATS_MAX_FIELDS];
    size_t             n;
    char               tables[STATS_MAX_TABLES][STATS_COL_MAX];
    size_t             n_tables;
    char               rows[STATS_MAX_ROWS][STATS_NAME_MAX];
    size_t             n_rows;
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

/* Does meta name figures "name.*.x": is section name a table? */
static bool stats_is_table(const struct tfs_json *meta, const char *name)
{
    size_t len = strlen(name);

    for (const struct tfs_json *m = meta ? meta->child : NULL; m != NULL;
         m = m->next) {
        if (strncmp(m->key, name, len) == 0 &&
            strncmp(m->key + len, ".*.", 3) == 0)
            return true;
    }
    return false;
}

/* One row of table t: its numbers, typed by meta's "table.*.col". */
static void stats_row(const struct tfs_json *v, const char *table, int t,
                      struct stats_set *s, const struct tfs_json *meta)
{
    char mname[STATS_NAME_MAX];
    int row = (int)s->n_rows;

    if (v->type != TFS_JSON_OBJECT || s->n_rows == STATS_MAX_ROWS)
        return;
    snprintf(s->rows[s->n_rows++], STATS_NAME_MAX, "%s", v->key);
    for (const struct tfs_json *m = v->child; m != NULL; m = m->next) {
        struct stats_field *f = &s->f[s->n];

        if (m->type != TFS_JSON_NUMBER || s->n == STATS_MAX_FIELDS)
            continue;
        s->n++;
        snprintf(f->name, STATS_NAME_MAX, "%s.%s.%s", table, v->key, m->key);
        snprintf(f->col, STATS_COL_MAX, "%s", m->key);
        f->v = strtod(m->s, NULL);
        f->table = t;
        f->row = row;
        snprintf(mname, sizeof(mname), "%s.*.%s", table, m->key);
        stats_meta(meta, mname, f);
    }
}

/* A table section: every member a row. */
static void stats_table(const struct tfs_json *v, const char *name,
                        struct stats_set *s, const struct tfs_json *meta)
{
    int t = (int)s->n_tables;

    if (s->n_tables == STATS_MAX_TABLES)
        return;
    snprintf(s->tables[s->n_tables++], STATS_COL_MAX, "%s", name);
    for (const struct tfs_json *r = v->child; r != NULL; r = r->next)
        stats_row(r, name, t, s, meta);
}

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
        if (depth == 0 && s != NULL && m->type == TFS_JSON_OBJECT &&
            stats_is_table(meta, m->key)) {
            stats_table(m, m->key, s, meta);
            continue;
        }
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
        f->table = -1;
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
    s->n_tables = 0;
    s->n_rows = 0;
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

/* ---- tables ---- */

#define STATS_TABLE_COLS 24
#define STATS_CELL_MAX 32

/* One table being printed: its columns, and the rate interval. */
struct stats_tab {
    const struct stats_set *s;
    const struct stats_set *prev;       /* or NULL: totals */
    double                  dt;         /* seconds since prev */
    int                     t;
    const char             *cols[STATS_TABLE_COLS];
    int                     width[STATS_TABLE_COLS + 1]; /* + the key */
    size_t                  n_cols;
    int                     req_col;    /* "requests", -1: none */
    double                  req_sum;    /* over the rows, for share */
};

/* A table's columns are its rows' figures but a summary's _count and
   _p95_us: p50 and p99 say enough on one line. */
static bool stats_col_shown(const char *col)
{
    size_t len = strlen(col);

    return !(len > 6 && strcmp(col + len - 6, "_count") == 0) &&
           !(len > 7 && strcmp(col + len - 7, "_p95_us") == 0);
}

/* A column's header: its name, a unit suffix cut ("latency_p50_us" is
   "latency_p50", "down_seconds" "down_s"): the cells say the unit. */
static const char *stats_col_head(const char *col, char *buf, size_t size)
{
    size_t len = strlen(col);

    if (len > 3 && strcmp(col + len - 3, "_us") == 0)
        snprintf(buf, size, "%.*s", (int)(len - 3), col);
    else if (len > 8 && strcmp(col + len - 8, "_seconds") == 0)
        snprintf(buf, size, "%.*s_s", (int)(len - 8), col);
    else
        snprintf(buf, size, "%s", col);
    return buf;
}

static const struct stats_field *stats_cell_field(const struct stats_tab *tb,
                                                  int row, const char *col)
{
    for (size_t i = 0; i < tb->s->n; i++) {
        const struct stats_field *f = &tb->s->f[i];

        if (f->table == tb->t && f->row == row && strcmp(f->col, col) == 0)
            return f;
    }
    return NULL;
}

/* The value a cell shows: the figure, or with -w a counter's rate. */
static double stats_cell_v(const struct stats_tab *tb,
                           const struct stats_field *f, bool *rate)
{
    const struct stats_field *p = tb->prev ? stats_find(tb->prev, f->name)
                                           : NULL;

    *rate = p != NULL && tb->dt > 0 && f->counter;
    return *rate ? (f->v - p->v) / tb->dt : f->v;
}

/* A cell's text, short: "1.2 MiB", "812 us", "3.4/s"; "-" when absent. */
static const char *stats_cell(const struct stats_tab *tb, int row,
                              const char *col, char *buf, size_t size)
{
    const struct stats_field *f = stats_cell_field(tb, row, col);
    bool rate;
    double v;

    if (f == NULL)
        return "-";
    v = stats_cell_v(tb, f, &rate);
    if (f->unit == STATS_US && !rate)
        snprintf(buf, size, v >= 1000 ? "%.1f ms" : "%.0f us",
                 v >= 1000 ? v / 1000 : v);
    else if (f->unit == STATS_SECONDS && !rate)
        snprintf(buf, size, "%.1f s", v);
    else
        stats_fmt(buf, size, f, v, rate);
    return buf;
}

/* The share of the requests of row, as "41%"; "" for no column. */
static const char *stats_share(const struct stats_tab *tb, int row,
                               char *buf, size_t size)
{
    const struct stats_field *f;
    bool rate;

    buf[0] = '\0';
    if (tb->req_col < 0)
        return buf;
    f = stats_cell_field(tb, row, tb->cols[tb->req_col]);
    if (f != NULL && tb->req_sum > 0)
        snprintf(buf, size, "%.0f%%",
                 100.0 * stats_cell_v(tb, f, &rate) / tb->req_sum);
    return buf;
}

/* Columns of table tb->t (its first row's), their widths, the sum of
   the requests. */
static void stats_tab_layout(struct stats_tab *tb)
{
    char buf[STATS_CELL_MAX];
    int first = -1;
    bool rate;

    tb->n_cols = 0;
    tb->req_col = -1;
    tb->req_sum = 0;
    tb->width[0] = (int)strlen(tb->s->tables[tb->t]);
    for (size_t i = 0; i < tb->s->n; i++) {
        const struct stats_field *f = &tb->s->f[i];

        if (f->table != tb->t)
            continue;
        if (first < 0)
            first = f->row;
        if (f->row == first && stats_col_shown(f->col) &&
            tb->n_cols < STATS_TABLE_COLS) {
            if (strcmp(f->col, "requests") == 0)
                tb->req_col = (int)tb->n_cols;
            tb->width[tb->n_cols + 1] = (int)strlen(
                stats_col_head(f->col, buf, sizeof(buf)));
            tb->cols[tb->n_cols++] = f->col;
        }
        if (strcmp(f->col, "requests") == 0)
            tb->req_sum += stats_cell_v(tb, f, &rate);
    }
    for (size_t r = 0; r < tb->s->n_rows; r++) {
        tb->width[0] = TFS_MAX(tb->width[0], (int)strlen(tb->s->rows[r]));
        for (size_t c = 0; c < tb->n_cols; c++)
            tb->width[c + 1] = TFS_MAX(tb->width[c + 1], (int)strlen(
                stats_cell(tb, (int)r, tb->cols[c], buf, sizeof(buf))));
    }
}

/* Does row r belong to table tb->t? */
static bool stats_row_in(const struct stats_tab *tb, size_t r)
{
    for (size_t i = 0; i < tb->s->n; i++) {
        if (tb->s->f[i].table == tb->t && tb->s->f[i].row == (int)r)
            return true;
    }
    return false;
}

static void stats_print_table(struct stats_tab *tb)
{
    char buf[STATS_CELL_MAX];
    char share[16];

    stats_tab_layout(tb);
    printf("\n  %-*s", tb->width[0], tb->s->tables[tb->t]);
    for (size_t c = 0; c < tb->n_cols; c++)
        printf("  %*s%s", tb->width[c + 1],
               stats_col_head(tb->cols[c], buf, sizeof(buf)),
               (int)c == tb->req_col ? "  share" : "");
    printf("\n");
    for (size_t r = 0; r < tb->s->n_rows; r++) {
        if (!stats_row_in(tb, r))
            continue;
        printf("  %-*s", tb->width[0], tb->s->rows[r]);
        for (size_t c = 0; c < tb->n_cols; c++) {
            printf("  %*s", tb->width[c + 1],
                   stats_cell(tb, (int)r, tb->cols[c], buf, sizeof(buf)));
            if ((int)c == tb->req_col)
                printf("  %5s", stats_share(tb, (int)r, share,
                                            sizeof(share)));
        }
        printf("\n");
    }
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

        if (f->table >= 0)
            continue;                   /* printed as a table below */
        r[0] = '\0';
        if (p != NULL && dt > 0 && f->counter)
            stats_fmt(r, sizeof(r), f, (f->v - p->v) / dt, true);
        printf("  %-32s %16s  %s\n", f->name,
               stats_fmt(a, sizeof(a), f, f->v, false), r);
    }
    if (rd != NULL && ram != NULL && disk != NULL && rd->v > 0)
        printf("  %-32s %14.1f %%\n", "hit ratio",
               100.0 * (ram->v + disk->v) / rd->v);
    for (size_t t = 0; t < s->n_tables; t++) {
        struct stats_tab tb = {.s = s, .prev = prev, .dt = dt, .t = (int)t};

        stats_print_table(&tb);
    }
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
