/* SPDX-License-Identifier: MIT */
/*
 * The fault store: a wrapper that makes the store below it behave like a
 * slow or flaky remote (include/tierfs/fault.h, docs/wrappers.md).
 *
 * Every operation first passes one gate, fault_enter(), which in order
 * logs the call (log=PATH), waits out (or refuses) a partition, sleeps
 * the injected latency and decides whether to fail with the injected
 * error.  Transfers then pay the
 * bandwidth cap (a put before calling through, a read after), and a read
 * may come back with one byte flipped.  Every stall ends early, with
 * -ETIMEDOUT, at the calling thread's deadline (tfs_deadline_get()), as a
 * real client's timer would.
 *
 * Settings live in an immutable, refcounted struct fault_cfg.
 * tfs_fault_configure() builds a new one and swaps it in, so a call never
 * sees half of a change and no lock is held while a call sleeps or calls
 * through.
 *
 * The file is divided into: settings (defaults, parsing, copying), random
 * draws, stalls (sleeping, partitions, the bandwidth link), the gate, the
 * operations, open/close, and the public functions.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tierfs/fault.h"
#include "tierfs/log.h"
#include "metrics/metrics.h"
#include "store/store_int.h"

#define FAULT_MAX_WINDOWS 64
#define FAULT_MAX_MS      1000000000.0          /* about 11.6 days */
#define FAULT_POLL_NS     (10 * 1000000ull)     /* partition_file polling */
#define FAULT_NS_PER_MS   1000000ull
#define FAULT_GOLDEN      0x9e3779b97f4a7c15ull /* splitmix64 increment */

enum fault_op {
    FAULT_STAT,
    FAULT_READ,
    FAULT_LIST,
    FAULT_PUT,
    FAULT_REMOVE,
    FAULT_COPY,
    FAULT_RENAME,
    FAULT_PART,                         /* a part of a multipart upload */
    FAULT_MPU,                          /* its create, complete, abort */
    FAULT_N_OPS
};

#define FAULT_ALL_OPS ((1u << FAULT_N_OPS) - 1)

static const char *const fault_op_names[FAULT_N_OPS] = {
    "stat", "read", "list", "put", "remove", "copy", "rename", "part", "mpu",
};

/* The random decisions one call can make, each drawn independently. */
enum fault_draw {
    FAULT_DRAW_JITTER,
    FAULT_DRAW_ERROR,
    FAULT_DRAW_FLIP,
    FAULT_DRAW_FLIP_AT,
    FAULT_DRAW_FLIP_MASK,
};

struct fault_window {
    uint64_t start_ns;                  /* since cfg->epoch_ns */
    uint64_t end_ns;                    /* exclusive */
};

/* One immutable set of settings; shared by the calls that use it. */
struct fault_cfg {
    atomic_uint         refs;           /* freed when it drops to 0 */
    uint64_t            latency_ns;
    uint64_t            jitter_ns;      /* plus uniform [0, jitter] */
    uint64_t            bw;             /* bytes/s; 0 = no cap */
    double              error_rate;     /* 0..1 */
    int                 error_rc;       /* -errno or TFS_E* */
    unsigned            error_ops;      /* 1u << enum fault_op */
    char                error_prefix[256]; /* only keys starting so;
                                           "" = every key */
    double              flip_rate;      /* 0..1 */
    uint64_t            flip_max;       /* flips in all; 0 = no limit */
    struct fault_window windows[FAULT_MAX_WINDOWS];
    size_t              n_windows;
    uint64_t            epoch_ns;       /* windows count from here */
    char               *partition_file; /* owned, or NULL */
    char               *log_path;       /* owned, or NULL: log=PATH */
    bool                refuse;         /* partition_mode=refuse */
    bool                seeded;         /* draws come from seed */
    uint64_t            seed;
};

struct fault_priv {
    pthread_mutex_t      lock;          /* guards cfg */
    struct fault_cfg    *cfg;           /* protected by lock; one ref */
    pthread_mutex_t      link_lock;     /* guards link_free_ns */
    uint64_t             link_free_ns;  /* protected by link_lock: when
                                           the emulated link is idle */
    atomic_uint_fast64_t seq;           /* numbers calls for seeded draws */
    atomic_uint_fast64_t n_calls;
    atomic_uint_fast64_t n_injected;
    atomic_uint_fast64_t n_flipped;
    atomic_uint_fast64_t n_delayed;
    atomic_uint_fast64_t delay_ns;
    atomic_uint_fast64_t n_partition;
    atomic_uint_fast64_t partition_ns;
    atomic_uint_fast64_t throttled_bytes;
    atomic_uint_fast64_t throttle_ns;
    atomic_uint_fast64_t n_timeouts;
};

/* One call in flight through the layer. */
struct fault_call {
    struct fault_priv *p;
    struct tfs_store  *next;
    struct fault_cfg  *cfg;             /* a reference, see fault_leave */
    enum fault_op      op;
    const char        *key;             /* for error details */
    uint64_t           seq;             /* this call's number */
};

/* ---- settings ---- */

static struct fault_cfg *fault_cfg_new(void)
{
    struct fault_cfg *c = tfs_calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    atomic_init(&c->refs, 1);
    c->error_rc = -ECONNRESET;
    c->error_ops = FAULT_ALL_OPS;
    c->epoch_ns = tfs_now_ns();
    return c;
}

/* A private copy of old, with one reference, to change and swap in. */
static struct fault_cfg *fault_cfg_dup(const struct fault_cfg *old)
{
    struct fault_cfg *c = tfs_malloc(sizeof(*c));

    if (c == NULL)
        return NULL;
    memcpy(c, old, sizeof(*c));
    atomic_init(&c->refs, 1);
    c->partition_file = NULL;
    c->log_path = NULL;
    if (old->partition_file != NULL)
        c->partition_file = tfs_strdup(old->partition_file);
    if (old->log_path != NULL)
        c->log_path = tfs_strdup(old->log_path);
    if ((old->partition_file != NULL && c->partition_file == NULL) ||
        (old->log_path != NULL && c->log_path == NULL)) {
        tfs_free(c->partition_file);
        tfs_free(c->log_path);
        tfs_free(c);
        return NULL;
    }
    return c;
}

static void fault_cfg_put(struct fault_cfg *c)
{
    if (c == NULL || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    tfs_free(c->partition_file);
    tfs_free(c->log_path);
    tfs_free(c);
}

/* The current settings, with a reference for the caller to put. */
static struct fault_cfg *fault_cfg_get(struct fault_priv *p)
{
    struct fault_cfg *c;

    pthread_mutex_lock(&p->lock);
    c = p->cfg;
    atomic_fetch_add(&c->refs, 1);
    pthread_mutex_unlock(&p->lock);
    return c;
}

/* Milliseconds (fractions allowed) to nanoseconds. */
static int fault_parse_ms(const char *v, uint64_t *ns)
{
    double ms;

    if (tfs_parse_double(v, &ms) < 0 || ms < 0 || ms > FAULT_MAX_MS)
        return TFS_EOPTION;
    *ns = (uint64_t)(ms * (double)FAULT_NS_PER_MS);
    return 0;
}

static int fault_parse_rate(const char *v, double *out)
{
    double r;

    if (tfs_parse_double(v, &r) < 0 || r < 0 || r > 1)
        return TFS_EOPTION;
    *out = r;
    return 0;
}

static int fault_set_latency(struct fault_cfg *c, const char *v)
{
    return fault_parse_ms(v, &c->latency_ns);
}

static int fault_set_jitter(struct fault_cfg *c, const char *v)
{
    return fault_parse_ms(v, &c->jitter_ns);
}

static int fault_set_bw(struct fault_cfg *c, const char *v)
{
    return tfs_parse_size(v, &c->bw);
}

static int fault_set_error_rate(struct fault_cfg *c, const char *v)
{
    return fault_parse_rate(v, &c->error_rate);
}

static int fault_set_flip_rate(struct fault_cfg *c, const char *v)
{
    return fault_parse_rate(v, &c->flip_rate);
}

static int fault_set_flip_max(struct fault_cfg *c, const char *v)
{
    return tfs_parse_u64(v, &c->flip_max);
}

static int fault_set_error_prefix(struct fault_cfg *c, const char *v)
{
    size_t len = strlen(v);

    if (len >= sizeof(c->error_prefix))
        return TFS_EOPTION;
    memcpy(c->error_prefix, v, len + 1);
    return 0;
}

static int fault_set_error(struct fault_cfg *c, const char *v)
{
    static const struct {
        const char *name;
        int         rc;
    } errors[] = {
        {"EIO", -EIO},
        {"EAGAIN", -EAGAIN},
        {"ETIMEDOUT", -ETIMEDOUT},
        {"ECONNRESET", -ECONNRESET},
        {"ECONNREFUSED", -ECONNREFUSED},
        {"ENOENT", -ENOENT},
        {"EACCES", -EACCES},
        {"server", TFS_ESERVER},
    };

    for (size_t i = 0; i < TFS_ARRAY_LEN(errors); i++) {
        if (strcasecmp(v, errors[i].name) == 0) {
            c->error_rc = errors[i].rc;
            return 0;
        }
    }
    return TFS_EOPTION;
}

/* The bit of one operation name (len bytes at s), or 0 when unknown. */
static unsigned fault_op_bit(const char *s, size_t len)
{
    if (len == 3 && strncmp(s, "all", 3) == 0)
        return FAULT_ALL_OPS;
    for (unsigned i = 0; i < FAULT_N_OPS; i++) {
        if (strlen(fault_op_names[i]) == len &&
            strncmp(s, fault_op_names[i], len) == 0)
            return 1u << i;
    }
    return 0;
}

static int fault_set_error_ops(struct fault_cfg *c, const char *v)
{
    unsigned mask = 0;

    for (const char *s = v;; s++) {
        const char *end = strchrnul(s, ',');
        unsigned bit = fault_op_bit(s, (size_t)(end - s));

        if (bit == 0)
            return TFS_EOPTION;
        mask |= bit;
        s = end;
        if (*s == '\0')
            break;
    }
    c->error_ops = mask;
    return 0;
}

/* One "START_MS+DUR_MS" window, len bytes at s. */
static int fault_parse_window(const char *s, size_t len,
                              struct fault_window *w)
{
    char item[48];
    char *plus;
    uint64_t start_ms;
    uint64_t dur_ms;

    if (len == 0 || len >= sizeof(item))
        return TFS_EOPTION;
    memcpy(item, s, len);
    item[len] = '\0';
    plus = strchr(item, '+');
    if (plus == NULL)
        return TFS_EOPTION;
    *plus = '\0';
    if (tfs_parse_u64(item, &start_ms) < 0 ||
        tfs_parse_u64(plus + 1, &dur_ms) < 0 ||
        start_ms > (uint64_t)FAULT_MAX_MS || dur_ms > (uint64_t)FAULT_MAX_MS)
        return TFS_EOPTION;
    w->start_ns = start_ms * FAULT_NS_PER_MS;
    w->end_ns = (start_ms + dur_ms) * FAULT_NS_PER_MS;
    return 0;
}

/* A comma list of windows; "" clears them.  Their clock starts now. */
static int fault_set_partition(struct fault_cfg *c, const char *v)
{
    struct fault_window w[FAULT_MAX_WINDOWS];
    size_t n = 0;

    for (const char *s = v; *s != '\0';) {
        const char *end = strchrnul(s, ',');

        if (n == FAULT_MAX_WINDOWS ||
            fault_parse_window(s, (size_t)(end - s), &w[n]) < 0)
            return TFS_EOPTION;
        n++;
        s = *end ? end + 1 : end;
    }
    memcpy(c->windows, w, n * sizeof(w[0]));
    c->n_windows = n;
    c->epoch_ns = tfs_now_ns();
    return 0;
}

/* A path whose existence partitions the store; "" clears it. */
static int fault_set_partition_file(struct fault_cfg *c, const char *v)
{
    char *path = NULL;

    if (v[0] != '\0') {
        path = tfs_strdup(v);
        if (path == NULL)
            return -ENOMEM;
    }
    tfs_free(c->partition_file);
    c->partition_file = path;
    return 0;
}

/* A file to append one line "OP KEY" to per call; "" stops logging. */
static int fault_set_log(struct fault_cfg *c, const char *v)
{
    char *path = NULL;

    if (v[0] != '\0') {
        path = tfs_strdup(v);
        if (path == NULL)
            return -ENOMEM;
    }
    tfs_free(c->log_path);
    c->log_path = path;
    return 0;
}

static int fault_set_partition_mode(struct fault_cfg *c, const char *v)
{
    if (strcmp(v, "hang") != 0 && strcmp(v, "refuse") != 0)
        return TFS_EOPTION;
    c->refuse = strcmp(v, "refuse") == 0;
    return 0;
}

static int fault_set_seed(struct fault_cfg *c, const char *v)
{
    if (tfs_parse_u64(v, &c->seed) < 0)
        return TFS_EOPTION;
    c->seeded = true;
    return 0;
}

/*
 * Every option: its setter returns 0, TFS_EOPTION (without a detail) or
 * -ENOMEM; expect completes the detail "option x=y: expected ...".
 */
static const struct fault_option {
    const char *name;
    int       (*set)(struct fault_cfg *c, const char *v);
    const char *expect;
} fault_options[] = {
    {"latency_ms", fault_set_latency, "milliseconds, e.g. 20 or 0.5"},
    {"jitter_ms", fault_set_jitter, "milliseconds, e.g. 20 or 0.5"},
    {"bw", fault_set_bw, "bytes per second, e.g. 200M"},
    {"error_rate", fault_set_error_rate, "a probability in [0, 1]"},
    {"error", fault_set_error, "EIO, EAGAIN, ETIMEDOUT, ECONNRESET, "
                               "ECONNREFUSED, ENOENT, EACCES or server"},
    {"error_ops", fault_set_error_ops, "a comma list of stat, read, list, "
                                       "put, remove, copy, rename, part, "
                                       "mpu or all"},
    {"error_prefix", fault_set_error_prefix, "a key prefix under 256 "
                                             "bytes"},
    {"flip_rate", fault_set_flip_rate, "a probability in [0, 1]"},
    {"flip_max", fault_set_flip_max, "a whole number (0: no limit)"},
    {"partition", fault_set_partition, "START_MS+DUR_MS[,...]"},
    {"partition_file", fault_set_partition_file, "a path"},
    {"partition_mode", fault_set_partition_mode, "hang or refuse"},
    {"seed", fault_set_seed, "a whole number"},
    {"log", fault_set_log, "a path"},
};

/* Apply value v of option o to c; from tells where v came from. */
static int fault_option_set(struct fault_cfg *c, const struct fault_option *o,
                            const char *v, const char *from)
{
    int rc = o->set(c, v);

    if (rc == TFS_EOPTION)
        return tfs_err(rc, "option %s=%s%s: expected %s", o->name, v, from,
                       o->expect);
    return rc;
}

/* Apply name=v to c; TFS_EOPTION naming it when it is not ours. */
static int fault_cfg_set(struct fault_cfg *c, const char *name,
                         const char *v)
{
    for (size_t i = 0; i < TFS_ARRAY_LEN(fault_options); i++) {
        if (strcmp(fault_options[i].name, name) == 0)
            return fault_option_set(c, &fault_options[i], v, "");
    }
    return tfs_err(TFS_EOPTION, "unknown fault option '%s'", name);
}

/* ---- random draws ---- */

static uint64_t fault_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/*
 * Draw one decision for this call.  Seeded, it is a function of (seed,
 * call number, decision) only, so the nth call of a run decides the same
 * way in every run, whatever the other settings draw.
 */
static uint64_t fault_draw(const struct fault_call *fc, enum fault_draw what)
{
    uint64_t base;

    if (!fc->cfg->seeded)
        return tfs_rand_u64();
    base = fault_mix(fc->cfg->seed + fc->seq * FAULT_GOLDEN);
    return fault_mix(base + ((uint64_t)what + 1) * FAULT_GOLDEN);
}

/* In [0, 1). */
static double fault_draw_double(const struct fault_call *fc,
                                enum fault_draw what)
{
    return (double)(fault_draw(fc, what) >> 11) * 0x1.0p-53;
}

/* ---- stalls ---- */

/* Fail the call with rc and the detail "fault: what (op 'key')". */
static int fault_fail(const struct fault_call *fc, int rc, const char *what)
{
    return tfs_err(rc, "fault: %s (%s '%s')", what, fault_op_names[fc->op],
                   fc->key);
}

static int fault_timeout(const struct fault_call *fc, const char *what)
{
    atomic_fetch_add(&fc->p->n_timeouts, 1);
    return fault_fail(fc, -ETIMEDOUT, what);
}

/*
 * Sleep until until_ns, or only until the calling thread's deadline when
 * that comes first: then -ETIMEDOUT.
 */
static int fault_sleep_until(uint64_t until_ns)
{
    uint64_t deadline = tfs_deadline_get();
    bool cut = deadline != 0 && deadline < until_ns;
    uint64_t end = cut ? deadline : until_ns;
    uint64_t now = tfs_now_ns();

    if (end > now)
        tfs_sleep_ns(end - now);
    return cut ? -ETIMEDOUT : 0;
}

static bool fault_is_partitioned(const struct fault_cfg *c, uint64_t now)
{
    uint64_t t = now > c->epoch_ns ? now - c->epoch_ns : 0;

    for (size_t i = 0; i < c->n_windows; i++) {
        if (t >= c->windows[i].start_ns && t < c->windows[i].end_ns)
            return true;
    }
    return c->partition_file != NULL && access(c->partition_file, F_OK) == 0;
}

/* Swap the call's settings for the current ones. */
static void fault_refresh(struct fault_call *fc)
{
    struct fault_cfg *c = fault_cfg_get(fc->p);

    fault_cfg_put(fc->cfg);
    fc->cfg = c;
}

/*
 * Hold the call while the store is partitioned: refuse it at once, or
 * hang like a black hole until the partition ends or the deadline
 * passes.  The settings are re-read at every poll, so lifting the
 * partition with tfs_fault_configure() releases hanging calls.
 */
static int fault_partition(struct fault_call *fc)
{
    uint64_t start = tfs_now_ns();
    uint64_t now = start;
    int rc = 0;

    if (!fault_is_partitioned(fc->cfg, now))
        return 0;
    atomic_fetch_add(&fc->p->n_partition, 1);
    do {
        if (fc->cfg->refuse)
            return fault_fail(fc, -ECONNREFUSED,
                              "partitioned, connection refused");
        rc = fault_sleep_until(now + FAULT_POLL_NS);
        fault_refresh(fc);
        now = tfs_now_ns();
    } while (rc == 0 && fault_is_partitioned(fc->cfg, now));
    atomic_fetch_add(&fc->p->partition_ns, now - start);
    return rc < 0 ? fault_timeout(fc, "partitioned, deadline passed") : 0;
}

/* Sleep latency plus jitter, once per call. */
static int fault_delay(struct fault_call *fc)
{
    const struct fault_cfg *c = fc->cfg;
    uint64_t ns = c->latency_ns;
    uint64_t start;
    int rc;

    if (c->jitter_ns > 0)
        ns += fault_draw(fc, FAULT_DRAW_JITTER) % (c->jitter_ns + 1);
    if (ns == 0)
        return 0;
    start = tfs_now_ns();
    rc = fault_sleep_until(start + ns);
    atomic_fetch_add(&fc->p->n_delayed, 1);
    atomic_fetch_add(&fc->p->delay_ns, tfs_now_ns() - start);
    if (rc < 0)
        return fault_timeout(fc, "deadline passed during injected latency");
    return 0;
}

/* Time to move len bytes at bw bytes/s, capped so sums cannot wrap. */
static uint64_t fault_xfer_ns(uint64_t len, uint64_t bw)
{
    double ns = (double)len * 1e9 / (double)bw;

    return ns > 1e18 ? (uint64_t)1e18 : (uint64_t)ns;
}

/*
 * A transfer cut short by its deadline gives back the link time it did
 * not use, when no later transfer has queued behind it.
 */
static void fault_link_release(struct fault_priv *p, uint64_t start,
                               uint64_t end)
{
    pthread_mutex_lock(&p->link_lock);
    if (p->link_free_ns == end)
        p->link_free_ns = TFS_MAX(start, tfs_now_ns());
    pthread_mutex_unlock(&p->link_lock);
}

/*
 * Charge len bytes to the emulated link that all threads of the store
 * share.  Transfers queue behind each other, each taking len / bw, with
 * no burst credit: a transfer of N bytes never completes sooner than
 * N / bw after it starts, and concurrent ones share the bandwidth.
 */
static int fault_throttle(struct fault_call *fc, uint64_t len)
{
    struct fault_priv *p = fc->p;
    uint64_t bw = fc->cfg->bw;
    uint64_t now = tfs_now_ns();
    uint64_t start;
    uint64_t end;
    int rc;

    if (bw == 0 || len == 0)
        return 0;
    pthread_mutex_lock(&p->link_lock);
    start = TFS_MAX(now, p->link_free_ns);
    end = start + fault_xfer_ns(len, bw);
    p->link_free_ns = end;
    pthread_mutex_unlock(&p->link_lock);
    atomic_fetch_add(&p->throttled_bytes, len);
    rc = fault_sleep_until(end);
    atomic_fetch_add(&p->throttle_ns, tfs_now_ns() - now);
    if (rc == 0)
        return 0;
    fault_link_release(p, start, end);
    return fault_timeout(fc, "deadline passed while throttled by bw");
}

/* Count one more flip unless flip_max are done already. */
static bool fault_flip_take(struct fault_priv *p, uint64_t max)
{
    uint_fast64_t n = atomic_load(&p->n_flipped);

    do {
        if (max != 0 && n >= max)
            return false;
    } while (!atomic_compare_exchange_weak(&p->n_flipped, &n, n + 1));
    return true;
}

/* Maybe flip one byte of the n just read, silently: in buf, or (buf
   NULL) across iov, in order (a scattered read).  A flip is a change
   after the bytes landed, so it is reported as one (info->land). */
static void fault_flip(struct fault_call *fc, void *buf,
                       const struct tfs_read_info *info, size_t n)
{
    const struct fault_cfg *c = fc->cfg;
    const struct iovec *iov = info->iov;
    int iovcnt = info->iovcnt;
    unsigned char *b = buf;
    size_t at, at0;

    if (n == 0 || c->flip_rate <= 0 ||
        fault_draw_double(fc, FAULT_DRAW_FLIP) >= c->flip_rate ||
        !fault_flip_take(fc->p, c->flip_max))
        return;
    at = at0 = (size_t)(fault_draw(fc, FAULT_DRAW_FLIP_AT) % n);
    for (int i = 0; b == NULL && i < iovcnt; i++) {
        if (at < iov[i].iov_len)
            b = iov[i].iov_base;
        else
            at -= iov[i].iov_len;
    }
    if (b == NULL)
        return;
    b[at] ^= (unsigned char)(fault_draw(fc, FAULT_DRAW_FLIP_MASK) % 255 + 1);
    if (info->land != NULL)
        info->land->fn(info->land->arg, at0, 1);
}

/* ---- the gate ---- */

static int fault_inject(const struct fault_call *fc)
{
    const struct fault_cfg *c = fc->cfg;
    int rc = c->error_rc;

    if (c->error_rate <= 0 || (c->error_ops & (1u << fc->op)) == 0 ||
        strncmp(fc->key, c->error_prefix, strlen(c->error_prefix)) != 0 ||
        fault_draw_double(fc, FAULT_DRAW_ERROR) >= c->error_rate)
        return 0;
    atomic_fetch_add(&fc->p->n_injected, 1);
    return tfs_err(rc, "fault: injected %s (%s '%s')",
                   rc == TFS_ESERVER ? "server error" : tfs_errname(rc),
                   fault_op_names[fc->op], fc->key);
}

/*
 * log=PATH: one line "OP KEY\n" per call, written with one write() to a
 * file opened O_APPEND, so the lines of several processes sharing the
 * file never interleave.  Best effort: a failing log never fails a call.
 */
static void fault_log(const struct fault_call *fc)
{
    char line[1024];
    int n;
    int fd;

    if (fc->cfg->log_path == NULL)
        return;
    n = snprintf(line, sizeof(line), "%s %s\n", fault_op_names[fc->op],
                 fc->key);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line)) {
        n = (int)sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    fd = open(fc->cfg->log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
              0600);
    if (fd < 0)
        return;
    if (write(fd, line, (size_t)n) != n)
        TFS_DEBUG("fault: short write to the log %s", fc->cfg->log_path);
    close(fd);
}

/*
 * The gate every operation passes first: partition, latency, injected
 * error.  0 means call through.  Either way, fault_leave() must follow.
 */
static int fault_enter(struct tfs_store *st, struct fault_call *fc,
                       enum fault_op op, const char *key)
{
    struct fault_priv *p = tfs_store_priv(st);
    int rc;

    fc->p = p;
    fc->next = tfs_store_next(st);
    fc->op = op;
    fc->key = key;
    fc->seq = atomic_fetch_add(&p->seq, 1);
    fc->cfg = fault_cfg_get(p);
    atomic_fetch_add(&p->n_calls, 1);
    fault_log(fc);
    rc = fault_partition(fc);
    if (rc == 0)
        rc = fault_delay(fc);
    if (rc == 0)
        rc = fault_inject(fc);
    return rc;
}

static int fault_leave(struct fault_call *fc, int rc)
{
    fault_cfg_put(fc->cfg);
    fc->cfg = NULL;
    return rc;
}

/* ---- operations ---- */

static int fault_stat(struct tfs_store *st, const char *key,
                      struct tfs_stat *out)
{
    struct fault_call fc;
    int rc = fault_enter(st, &fc, FAULT_STAT, key);

    if (rc == 0)
        rc = tfs_store_stat(fc.next, key, out);
    return fault_leave(&fc, rc);
}

/* info comes up from below unchanged: a flip stands for a bad transfer. */
static int fault_read(struct tfs_store *st, const char *key, void *buf,
                      size_t len, uint64_t off, const char *if_version,
                      size_t *nread, struct tfs_read_info *info)
{
    struct fault_call fc;
    size_t n = 0;
    int rc = fault_enter(st, &fc, FAULT_READ, key);

    if (rc == 0)
        rc = tfs_store_read_ex(fc.next, key, buf, len, off, if_version, &n,
                               info);
    if (rc == 0)
        rc = fault_throttle(&fc, n);
    if (rc == 0) {
        fault_flip(&fc, buf, info, n);
        *nread = n;
    }
    return fault_leave(&fc, rc);
}

static int fault_list(struct tfs_store *st, const char *prefix,
                      const char *delim, const char *token, size_t max_keys,
                      struct tfs_list_page *page)
{
    struct fault_call fc;
    int rc = fault_enter(st, &fc, FAULT_LIST, prefix);

    if (rc == 0)
        rc = tfs_store_list(fc.next, prefix, delim, token, max_keys, page);
    return fault_leave(&fc, rc);
}

/* The upload pays the bandwidth cap before the store sees anything. */
static int fault_put(struct tfs_store *st, const char *key,
                     const struct tfs_source *src, struct tfs_stat *out)
{
    struct fault_call fc;
    int rc = fault_enter(st, &fc, FAULT_PUT, key);

    if (rc == 0)
        rc = fault_throttle(&fc, src->len);
    if (rc == 0)
        rc = tfs_store_put_source(fc.next, key, src, out);
    return fault_leave(&fc, rc);
}

static int fault_remove(struct tfs_store *st, const char *key)
{
    struct fault_call fc;
    int rc = fault_enter(st, &fc, FAULT_REMOVE, key);

    if (rc == 0)
        rc = tfs_store_remove(fc.next, key);
    return fault_leave(&fc, rc);
}

/*
 * An operation the store below lacks costs no round trip: it answers
 * (-ENOTSUP, so tfs_store_move() can fall back) without faults.
 */
static bool fault_next_lacks(struct tfs_store *st, unsigned cap)
{
    return (tfs_store_caps(tfs_store_next(st)) & cap) == 0;
}

static int fault_copy(struct tfs_store *st, const char *src,
                      const char *dst)
{
    struct fault_call fc;
    int rc;

    if (fault_next_lacks(st, TFS_SCAP_COPY))
        return tfs_store_copy(tfs_store_next(st), src, dst);
    rc = fault_enter(st, &fc, FAULT_COPY, src);

    if (rc == 0)
        rc = tfs_store_copy(fc.next, src, dst);
    return fault_leave(&fc, rc);
}

static int fault_rename(struct tfs_store *st, const char *src,
                        const char *dst)
{
    struct fault_call fc;
    int rc;

    if (fault_next_lacks(st, TFS_SCAP_RENAME))
        return tfs_store_rename(tfs_store_next(st), src, dst);
    rc = fault_enter(st, &fc, FAULT_RENAME, src);

    if (rc == 0)
        rc = tfs_store_rename(fc.next, src, dst);
    return fault_leave(&fc, rc);
}

/* Multipart uploads part by part: "mpu" faults their create, complete
   and abort, "part" their parts, which pay the bandwidth cap as puts do. */
static uint64_t fault_part_size(struct tfs_store *st)
{
    return tfs_store_part_size(tfs_store_next(st));
}

static int fault_mpu_create(struct tfs_store *st, const char *key,
                            char *upload_id)
{
    struct fault_call fc;
    int rc = fault_enter(st, &fc, FAULT_MPU, key);

    if (rc == 0)
        rc = tfs_store_mpu_create(fc.next, key, upload_id);
    return fault_leave(&fc, rc);
}

static int fault_mpu_part(struct tfs_store *st, const char *key,
                          const char *upload_id, unsigned part_no,
                          const struct tfs_source *src, char *etag)
{
    struct fault_call fc;
    int rc = fault_enter(st, &fc, FAULT_PART, key);

    if (rc == 0)
        rc = fault_throttle(&fc, src->len);
    if (rc == 0)
        rc = tfs_store_mpu_part(fc.next, key, upload_id, part_no, src,
                                etag);
    return fault_leave(&fc, rc);
}

static int fault_mpu_complete(struct tfs_store *st, const char *key,
                              const char *upload_id,
                              const char (*etags)[TFS_VERSION_MAX],
                              unsigned n_parts, struct tfs_stat *out)
{
    struct fault_call fc;
    int rc = fault_enter(st, &fc, FAULT_MPU, key);

    if (rc == 0)
        rc = tfs_store_mpu_complete(fc.next, key, upload_id, etags, n_parts,
                                    out);
    return fault_leave(&fc, rc);
}

static int fault_mpu_abort(struct tfs_store *st, const char *key,
                           const char *upload_id)
{
    struct fault_call fc;
    int rc = fault_enter(st, &fc, FAULT_MPU, key);

    if (rc == 0)
        rc = tfs_store_mpu_abort(fc.next, key, upload_id);
    return fault_leave(&fc, rc);
}

/* ---- open / close ---- */

/* Apply option o from the URI, else from the TIERFS_FAULT bag env. */
static int fault_open_option(struct tfs_store *st, struct tfs_opts *env,
                             struct fault_cfg *c, const struct fault_option *o)
{
    const char *env_v = tfs_opts_take(env, o->name);
    const char *v = NULL;
    int rc = tfs_store_opt_str(st, o->name, &v);

    if (rc < 0)
        return rc;
    if (v != NULL)
        return fault_option_set(c, o, v, "");
    if (env_v != NULL)
        return fault_option_set(c, o, env_v, " (from TIERFS_FAULT)");
    return 0;
}

/* Fill c from the URI's options over those of $TIERFS_FAULT. */
static int fault_open_cfg(struct tfs_store *st, struct fault_cfg *c)
{
    struct tfs_opts env = {0};
    const char *unused;
    int rc = tfs_opts_parse(&env, getenv("TIERFS_FAULT"));

    if (rc == TFS_EOPTION)
        rc = tfs_err(rc, "TIERFS_FAULT holds a malformed option");
    for (size_t i = 0; rc == 0 && i < TFS_ARRAY_LEN(fault_options); i++)
        rc = fault_open_option(st, &env, c, &fault_options[i]);
    unused = rc == 0 ? tfs_opts_unused(&env) : NULL;
    if (unused != NULL)
        rc = tfs_err(TFS_EOPTION, "unknown option '%s' in TIERFS_FAULT",
                     unused);
    tfs_opts_cleanup(&env);
    return rc;
}

static int fault_open(struct tfs_store *st, const char *location)
{
    struct fault_priv *p = tfs_store_priv(st);
    struct fault_cfg *c = fault_cfg_new();
    int rc;

    (void)location;
    if (c == NULL)
        return -ENOMEM;
    rc = fault_open_cfg(st, c);
    if (rc < 0) {
        fault_cfg_put(c);
        return rc;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->link_lock, NULL);
    p->cfg = c;
    return 0;
}

static void fault_close(struct tfs_store *st)
{
    struct fault_priv *p = tfs_store_priv(st);

    fault_cfg_put(p->cfg);
    pthread_mutex_destroy(&p->link_lock);
    pthread_mutex_destroy(&p->lock);
}

const struct tfs_store_ops tfs_fault_ops = {
    .version   = TFS_STORE_OPS_VERSION,
    .scheme    = "fault",
    .priv_size = sizeof(struct fault_priv),
    .caps      = TFS_SCAP_WRAPPER,
    .open      = fault_open,
    .close     = fault_close,
    .stat      = fault_stat,
    .read_ex   = fault_read,
    .list      = fault_list,
    .put       = fault_put,
    .remove    = fault_remove,
    .copy      = fault_copy,
    .rename    = fault_rename,
    .part_size = fault_part_size,
    .mpu_create = fault_mpu_create,
    .mpu_part  = fault_mpu_part,
    .mpu_complete = fault_mpu_complete,
    .mpu_abort = fault_mpu_abort,
};

/* ---- public functions ---- */

void tfs_fault_get_stats(struct tfs_store *st, struct tfs_fault_stats *out)
{
    struct tfs_store *f = tfs_store_find(st, "fault");
    struct fault_priv *p;

    memset(out, 0, sizeof(*out));
    if (f == NULL)
        return;
    p = tfs_store_priv(f);
    out->calls = atomic_load(&p->n_calls);
    out->injected_errors = atomic_load(&p->n_injected);
    out->flipped_reads = atomic_load(&p->n_flipped);
    out->delayed_calls = atomic_load(&p->n_delayed);
    out->delay_ns_total = atomic_load(&p->delay_ns);
    out->partition_waits = atomic_load(&p->n_partition);
    out->partition_ns_total = atomic_load(&p->partition_ns);
    out->throttled_bytes = atomic_load(&p->throttled_bytes);
    out->throttle_ns_total = atomic_load(&p->throttle_ns);
    out->timeouts = atomic_load(&p->n_timeouts);
}

/* The "fault" section of the registry: tfs_fault_stats (the ns totals
   under names without "_total", which Prometheus adds). */
#define FAULT_METRIC(field, kind, name, type, unit, help)                  \
    TFS_METRIC_DESC_AT(struct tfs_fault_stats, field, kind, name, type,    \
                       unit, NULL, help)
static const struct tfs_metric fault_metric_table[] = {
    FAULT_METRIC(calls, U64, "calls", COUNTER, COUNT,
                 "operations that entered the fault layer")
    FAULT_METRIC(injected_errors, U64, "injected_errors", COUNTER, COUNT,
                 "operations failed with the injected error")
    FAULT_METRIC(flipped_reads, U64, "flipped_reads", COUNTER, COUNT,
                 "reads returned with a flipped byte")
    FAULT_METRIC(delayed_calls, U64, "delayed_calls", COUNTER, COUNT,
                 "operations that waited for latency or jitter")
    FAULT_METRIC(delay_ns_total, U64, "delay_ns", COUNTER, NS,
                 "latency and jitter added")
    FAULT_METRIC(partition_waits, U64, "partition_waits", COUNTER, COUNT,
                 "operations that met a partition (hang or refuse)")
    FAULT_METRIC(partition_ns_total, U64, "partition_ns", COUNTER, NS,
                 "time spent hanging in partitions")
    FAULT_METRIC(throttled_bytes, U64, "throttled_bytes", COUNTER, BYTES,
                 "bytes charged to the bandwidth cap")
    FAULT_METRIC(throttle_ns_total, U64, "throttle_ns", COUNTER, NS,
                 "time spent waiting for the bandwidth cap")
    FAULT_METRIC(timeouts, U64, "timeouts", COUNTER, COUNT,
                 "operations failed at their deadline while stalled here")
};
#undef FAULT_METRIC

const struct tfs_metric_section tfs_metrics_fault = {
    .name = "fault",
    .prom_prefix = "fault_",
    .when = "mounts of a URI with fault+",
    .m = fault_metric_table,
    .n = TFS_ARRAY_LEN(fault_metric_table),
    .size = sizeof(struct tfs_fault_stats),
};

/* Build the new settings from the current ones and swap them in. */
static int fault_reconfigure(struct fault_priv *p, const struct tfs_opts *o)
{
    struct fault_cfg *c;
    bool reseed = false;
    int rc = 0;

    pthread_mutex_lock(&p->lock);
    c = fault_cfg_dup(p->cfg);
    if (c == NULL)
        rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < o->n; i++) {
        rc = fault_cfg_set(c, o->v[i].name, o->v[i].value);
        reseed = reseed || strcmp(o->v[i].name, "seed") == 0;
    }
    if (rc == 0) {
        struct fault_cfg *old = p->cfg;

        p->cfg = c;
        c = old;                        /* dropped below */
        if (reseed)
            atomic_store(&p->seq, 0);
    }
    pthread_mutex_unlock(&p->lock);
    fault_cfg_put(c);
    return rc;
}

int tfs_fault_configure(struct tfs_store *st, const char *options)
{
    struct tfs_store *f = tfs_store_find(st, "fault");
    struct tfs_opts opts = {0};
    int rc;

    tfs_errdetail_clear();
    if (f == NULL)
        return tfs_err(-EINVAL, "the store has no fault layer");
    rc = tfs_opts_parse(&opts, options);
    if (rc == 0)
        rc = fault_reconfigure(tfs_store_priv(f), &opts);
    tfs_opts_cleanup(&opts);
    return rc;
}
