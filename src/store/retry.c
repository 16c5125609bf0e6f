/* SPDX-License-Identifier: MIT */
/*
 * The retry store: a wrapper that absorbs network blips of the store below
 * it (include/tierfs/retry.h, docs/wrappers.md).
 *
 * Every operation becomes an attempt function and goes through one loop,
 * retry_run(): attempt under a per-attempt deadline (timeout_ms, plus
 * bytes / min_rate for the bytes a put, a copy or a large read moves, so
 * a transfer is never cut for being big); on a retryable error
 * (tfs_err_is_retryable) back off with full jitter and attempt again,
 * until it succeeds, fails for good, runs out of attempts or reaches the
 * overall deadline.  The deadline travels to the layers below in the
 * calling thread's request deadline (tfs_deadline_set), which the S3
 * client turns into curl timeouts and the fault layer into cut stalls;
 * the caller's own deadline is honoured and restored after each attempt.
 *
 * The file is divided into: settings, the loop, the operations, open and
 * the public function.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "tierfs/log.h"
#include "tierfs/retry.h"
#include "metrics/metrics.h"
#include "store/store_int.h"

#define RETRY_NS_PER_MS 1000000ull
#define RETRY_MAX_MS    1000000000ull   /* about 11.6 days */
#define RETRY_SMALL_READ (4ull << 20)   /* reads up to this: no allowance */
#define RETRY_OUTAGE_MAX_MS 1000        /* backoff cap while refused */

struct retry_priv {
    uint64_t             retries;       /* attempts after the first */
    uint64_t             base_ms;       /* first backoff cap */
    uint64_t             max_ms;        /* cap of any one backoff */
    uint64_t             timeout_ms;    /* per attempt; 0 = none */
    uint64_t             deadline_ms;   /* per operation; 0 = none */
    uint64_t             min_rate;      /* bytes/s a transfer is allowed;
                                           0 = no allowance */
    bool                 wait_refused;  /* refused after an answer: retry
                                           until the deadline */
    atomic_bool          answered;      /* an operation has succeeded */
    atomic_uint_fast64_t n_calls;
    atomic_uint_fast64_t n_retries;
    atomic_uint_fast64_t n_giveups;
    atomic_uint_fast64_t n_deadline;
};

/* One attempt of an operation against the next store. */
typedef int retry_attempt_fn(struct tfs_store *next, void *arg);

struct retry_op {
    const char       *name;             /* "read", for logs */
    const char       *key;              /* for logs */
    retry_attempt_fn *attempt;
    void             *arg;              /* the operation's arguments */
    uint64_t          bytes;            /* moved by one attempt, for the
                                           time allowance */
};

/* ---- settings ---- */

#define RETRY_OPT(name, kind, field, max)                                  \
    {name, kind, offsetof(struct retry_priv, field), 0, max, NULL, NULL}

/* The URI options of the layer (docs/wrappers.md); defaults below. */
static const struct tfs_opt_spec retry_opts[] = {
    RETRY_OPT("retries", TFS_OPT_U64, retries, UINT32_MAX),
    RETRY_OPT("retry_base_ms", TFS_OPT_MS, base_ms, RETRY_MAX_MS),
    RETRY_OPT("retry_max_ms", TFS_OPT_MS, max_ms, RETRY_MAX_MS),
    RETRY_OPT("timeout_ms", TFS_OPT_MS, timeout_ms, RETRY_MAX_MS),
    RETRY_OPT("deadline_ms", TFS_OPT_MS, deadline_ms, RETRY_MAX_MS),
    RETRY_OPT("min_rate", TFS_OPT_SIZE, min_rate, TFS_OPT_NOMAX),
    RETRY_OPT("wait_refused", TFS_OPT_BOOL, wait_refused, 1),
};

static void retry_defaults(struct retry_priv *p)
{
    p->retries = 4;
    p->base_ms = 50;
    p->max_ms = 5000;
    p->timeout_ms = 30000;
    p->deadline_ms = 120000;
    p->min_rate = 256u << 10;
    p->wait_refused = true;
}

/* The earlier of two deadlines, where 0 means none. */
static uint64_t retry_earlier(uint64_t a, uint64_t b)
{
    if (a == 0)
        return b;
    if (b == 0)
        return a;
    return TFS_MIN(a, b);
}

/* now + ms, or 0 (none) when ms is 0. */
static uint64_t retry_after_ms(uint64_t now, uint64_t ms)
{
    return ms == 0 ? 0 : now + ms * RETRY_NS_PER_MS;
}

/*
 * The time one attempt may take to move op->bytes at min_rate, added to
 * timeout_ms and deadline_ms: without it an upload longer than one
 * attempt could never finish (each attempt cut, then retried forever).
 */
static uint64_t retry_allowance_ms(const struct retry_priv *p,
                                   const struct retry_op *op)
{
    if (p->min_rate == 0 || op->bytes == 0)
        return 0;
    return TFS_MIN(op->bytes / p->min_rate * 1000 +
                   op->bytes % p->min_rate * 1000 / p->min_rate,
                   RETRY_MAX_MS);
}

/* ms + extra_ms, where 0 stays "none". */
static uint64_t retry_plus_ms(uint64_t ms, uint64_t extra_ms)
{
    return ms == 0 ? 0 : ms + extra_ms;
}

/*
 * The backoff before retry n (0 for the first): full jitter under a cap
 * that doubles from retry_base_ms up to retry_max_ms.
 */
static uint64_t retry_backoff_ns(const struct retry_priv *p, uint64_t n)
{
    uint64_t cap_ms = p->base_ms;

    for (uint64_t i = 0; i < n && cap_ms > 0 && cap_ms < p->max_ms; i++)
        cap_ms *= 2;
    cap_ms = TFS_MIN(cap_ms, p->max_ms);
    return tfs_rand_u64() % (cap_ms * RETRY_NS_PER_MS + 1);
}

/* ---- the loop ---- */

/*
 * An attempt that reached no server: refused, or no route.  From a store
 * that has answered before, that is a gateway restarting or a link down
 * for a while, not a wrong address; such attempts fail at once, so
 * `retries` would be spent in well under a second.
 */
static bool retry_is_outage(int rc)
{
    return rc == -ECONNREFUSED || rc == -EHOSTUNREACH ||
           rc == -ENETUNREACH || rc == -ENETDOWN;
}

/*
 * Sleep before retry n, but never past the overall deadline: false when
 * that deadline is reached instead.  In an outage the sleeps stay short,
 * so the first attempt after the store is back is not far behind it.
 */
static bool retry_backoff(const struct retry_priv *p,
                          const struct retry_op *op, uint64_t n,
                          uint64_t overall, int rc, bool outage)
{
    uint64_t ns = retry_backoff_ns(p, n);
    uint64_t now = tfs_now_ns();

    if (outage)
        ns = TFS_MIN(ns, (uint64_t)RETRY_OUTAGE_MAX_MS * RETRY_NS_PER_MS);

    TFS_DEBUG("retry: %s '%s' attempt %llu failed: %s (%s); retrying in "
              "%llu ms", op->name, op->key, (unsigned long long)n + 1,
              tfs_strerror(rc), tfs_errdetail(),
              (unsigned long long)(ns / RETRY_NS_PER_MS));
    if (overall != 0 && now + ns >= overall) {
        if (overall > now)
            tfs_sleep_ns(overall - now);
        return false;
    }
    tfs_sleep_ns(ns);
    return true;
}

/* End an operation that ran out of attempts with rc. */
static int retry_give_up(struct retry_priv *p, const struct retry_op *op,
                         uint64_t attempts, int rc)
{
    atomic_fetch_add(&p->n_giveups, 1);
    TFS_INFO("retry: %s '%s' failed after %llu attempts: %s (%s)",
             op->name, op->key, (unsigned long long)attempts,
             tfs_strerror(rc), tfs_errdetail());
    return rc;
}

/*
 * End an operation whose overall deadline passed; rc is the last
 * attempt's error, or 0 when there was none (then -ETIMEDOUT).
 */
static int retry_deadline(struct retry_priv *p, const struct retry_op *op,
                          uint64_t attempts, int rc)
{
    atomic_fetch_add(&p->n_deadline, 1);
    if (rc == 0)
        rc = tfs_err(-ETIMEDOUT, "retry: deadline passed before %s '%s' "
                     "could start", op->name, op->key);
    TFS_INFO("retry: %s '%s' failed after %llu attempts, deadline "
             "reached: %s (%s)", op->name, op->key,
             (unsigned long long)attempts, tfs_strerror(rc),
             tfs_errdetail());
    return rc;
}

/*
 * Run op: attempt, and while it fails with a retryable error and both
 * attempts and time remain, back off and attempt again.  Each attempt
 * runs under the earliest of its timeout, the overall deadline and the
 * caller's deadline; the caller's deadline is restored after each.  The
 * timeout and the overall deadline both grow by the op's allowance.
 * With wait_refused, an outage (retry_is_outage) of a store that has
 * answered before (an operation through this layer succeeded) does not
 * use up the attempts: only a deadline ends it, so without any deadline
 * the attempts still count.
 */
static int retry_run(struct tfs_store *st, const struct retry_op *op)
{
    struct retry_priv *p = tfs_store_priv(st);
    uint64_t caller = tfs_deadline_get();
    uint64_t now = tfs_now_ns();
    uint64_t extra_ms = retry_allowance_ms(p, op);
    uint64_t timeout_ms = retry_plus_ms(p->timeout_ms, extra_ms);
    uint64_t overall = retry_earlier(
        retry_after_ms(now, retry_plus_ms(p->deadline_ms, extra_ms)),
        caller);
    uint64_t attempts = 0;
    uint64_t counted = 0;               /* attempts that use up retries */
    bool outage;
    int rc;

    atomic_fetch_add(&p->n_calls, 1);
    if (overall != 0 && now >= overall)
        return retry_deadline(p, op, 0, 0);
    for (;;) {
        uint64_t attempt_dl = retry_after_ms(tfs_now_ns(), timeout_ms);

        tfs_deadline_set(retry_earlier(attempt_dl, overall));
        rc = op->attempt(tfs_store_next(st), op->arg);
        tfs_deadline_set(caller);
        attempts++;
        if (rc == 0 && !atomic_load_explicit(&p->answered,
                                             memory_order_relaxed))
            atomic_store(&p->answered, true);
        if (rc == 0 || !tfs_err_is_retryable(rc))
            return rc;
        outage = p->wait_refused && overall != 0 && retry_is_outage(rc) &&
                 atomic_load(&p->answered);
        if (!outage && ++counted > p->retries)
            return retry_give_up(p, op, attempts, rc);
        if (!retry_backoff(p, op, attempts - 1, overall, rc, outage))
            return retry_deadline(p, op, attempts, rc);
        atomic_fetch_add(&p->n_retries, 1);
    }
}

/* ---- operations ---- */

struct retry_stat_args {
    const char      *key;
    struct tfs_stat *out;
};

static int retry_stat_once(struct tfs_store *next, void *arg)
{
    struct retry_stat_args *a = arg;

    return tfs_store_stat(next, a->key, a->out);
}

static int retry_stat(struct tfs_store *st, const char *key,
                      struct tfs_stat *out)
{
    struct retry_stat_args a = {key, out};
    struct retry_op op = {"stat", key, retry_stat_once, &a, 0};

    return retry_run(st, &op);
}

struct retry_read_args {
    const char *key;
    void       *buf;
    size_t      len;
    uint64_t    off;
    const char *if_version;
    size_t     *nread;
    struct tfs_read_info *info;         /* the last attempt's, passed up */
};

static int retry_read_once(struct tfs_store *next, void *arg)
{
    struct retry_read_args *a = arg;

    return tfs_store_read_ex(next, a->key, a->buf, a->len, a->off,
                             a->if_version, a->nread, a->info);
}

static int retry_read(struct tfs_store *st, const char *key, void *buf,
                      size_t len, uint64_t off, const char *if_version,
                      size_t *nread, struct tfs_read_info *info)
{
    struct retry_read_args a = {key, buf, len, off, if_version, nread,
                                info};
    struct retry_op op = {"read", key, retry_read_once, &a,
                          len > RETRY_SMALL_READ ? len : 0};

    return retry_run(st, &op);
}

struct retry_list_args {
    const char           *prefix;
    const char           *delim;
    const char           *token;
    size_t                max_keys;
    struct tfs_list_page *page;
};

/* A failed attempt leaves the page zeroed (tfs_store_list). */
static int retry_list_once(struct tfs_store *next, void *arg)
{
    struct retry_list_args *a = arg;

    return tfs_store_list(next, a->prefix, a->delim, a->token, a->max_keys,
                          a->page);
}

static int retry_list(struct tfs_store *st, const char *prefix,
                      const char *delim, const char *token, size_t max_keys,
                      struct tfs_list_page *page)
{
    struct retry_list_args a = {prefix, delim, token, max_keys, page};
    struct retry_op op = {"list", prefix, retry_list_once, &a, 0};

    return retry_run(st, &op);
}

struct retry_put_args {
    const char              *key;
    const struct tfs_source *src;
    struct tfs_stat         *out;
};

/* The source is read with pread() at offsets, so each attempt rereads. */
static int retry_put_once(struct tfs_store *next, void *arg)
{
    struct retry_put_args *a = arg;

    return tfs_store_put_source(next, a->key, a->src, a->out);
}

static int retry_put(struct tfs_store *st, const char *key,
                     const struct tfs_source *src, struct tfs_stat *out)
{
    struct retry_put_args a = {key, src, out};
    struct retry_op op = {"put", key, retry_put_once, &a, src->len};

    return retry_run(st, &op);
}

static int retry_remove_once(struct tfs_store *next, void *arg)
{
    return tfs_store_remove(next, arg);
}

static int retry_remove(struct tfs_store *st, const char *key)
{
    struct retry_op op = {"remove", key, retry_remove_once,
                          (void *)key, 0};

    return retry_run(st, &op);
}

struct retry_pair_args {
    const char *src;
    const char *dst;
};

/*
 * The size of key, for the allowance of a copy (even a server-side copy
 * moves every byte): one stat under the plain per-attempt timeout,
 * 0 when that fails (the operation then reports the error itself).
 */
static uint64_t retry_size(struct tfs_store *st, const char *key)
{
    struct retry_priv *p = tfs_store_priv(st);
    uint64_t caller = tfs_deadline_get();
    struct tfs_stat sb;
    int rc;

    if (p->min_rate == 0 || (p->timeout_ms == 0 && p->deadline_ms == 0))
        return 0;                       /* no limit to widen */
    tfs_deadline_set(retry_earlier(retry_after_ms(tfs_now_ns(),
                                                  p->timeout_ms), caller));
    rc = tfs_store_stat(tfs_store_next(st), key, &sb);
    tfs_deadline_set(caller);
    tfs_errdetail_clear();
    return rc == 0 ? sb.size : 0;
}

static int retry_copy_once(struct tfs_store *next, void *arg)
{
    struct retry_pair_args *a = arg;

    return tfs_store_copy(next, a->src, a->dst);
}

static int retry_copy(struct tfs_store *st, const char *src,
                      const char *dst)
{
    struct retry_pair_args a = {src, dst};
    struct retry_op op = {"copy", src, retry_copy_once, &a,
                          retry_size(st, src)};

    return retry_run(st, &op);
}

static int retry_rename_once(struct tfs_store *next, void *arg)
{
    struct retry_pair_args *a = arg;

    return tfs_store_rename(next, a->src, a->dst);
}

static int retry_rename(struct tfs_store *st, const char *src,
                        const char *dst)
{
    struct retry_pair_args a = {src, dst};
    struct retry_op op = {"rename", src, retry_rename_once, &a, 0};

    return retry_run(st, &op);
}

/*
 * Multipart uploads part by part.  A part is sent again whole (the
 * store replaces a part number sent twice); a create retried after a
 * lost answer may leave an empty upload behind (a lifecycle rule covers
 * it, docs/s3.md); an abort of an upload that is gone succeeds.
 */
struct retry_mpu_args {
    const char                 *key;
    const char                 *upload_id;
    char                       *id_out;
    unsigned                    part_no;
    const struct tfs_source    *src;
    char                       *etag;
    const char                (*etags)[TFS_VERSION_MAX];
    struct tfs_stat            *out;
};

static uint64_t retry_part_size(struct tfs_store *st)
{
    return tfs_store_part_size(tfs_store_next(st));
}

static int retry_mpu_create_once(struct tfs_store *next, void *arg)
{
    struct retry_mpu_args *a = arg;

    return tfs_store_mpu_create(next, a->key, a->id_out);
}

static int retry_mpu_create(struct tfs_store *st, const char *key,
                            char *upload_id)
{
    struct retry_mpu_args a = {.key = key, .id_out = upload_id};
    struct retry_op op = {"mpu create", key, retry_mpu_create_once, &a, 0};

    return retry_run(st, &op);
}

static int retry_mpu_part_once(struct tfs_store *next, void *arg)
{
    struct retry_mpu_args *a = arg;

    return tfs_store_mpu_part(next, a->key, a->upload_id, a->part_no,
                              a->src, a->etag);
}

static int retry_mpu_part(struct tfs_store *st, const char *key,
                          const char *upload_id, unsigned part_no,
                          const struct tfs_source *src, char *etag)
{
    struct retry_mpu_args a = {.key = key, .upload_id = upload_id,
                               .part_no = part_no, .src = src,
                               .etag = etag};
    struct retry_op op = {"part", key, retry_mpu_part_once, &a, src->len};

    return retry_run(st, &op);
}

static int retry_mpu_complete_once(struct tfs_store *next, void *arg)
{
    struct retry_mpu_args *a = arg;

    return tfs_store_mpu_complete(next, a->key, a->upload_id, a->etags,
                                  a->part_no, a->out);
}

static int retry_mpu_complete(struct tfs_store *st, const char *key,
                              const char *upload_id,
                              const char (*etags)[TFS_VERSION_MAX],
                              unsigned n_parts, struct tfs_stat *out)
{
    struct retry_mpu_args a = {.key = key, .upload_id = upload_id,
                               .part_no = n_parts, .etags = etags,
                               .out = out};
    struct retry_op op = {"mpu complete", key, retry_mpu_complete_once, &a,
                          0};

    return retry_run(st, &op);
}

static int retry_mpu_abort_once(struct tfs_store *next, void *arg)
{
    struct retry_mpu_args *a = arg;

    return tfs_store_mpu_abort(next, a->key, a->upload_id);
}

static int retry_mpu_abort(struct tfs_store *st, const char *key,
                           const char *upload_id)
{
    struct retry_mpu_args a = {.key = key, .upload_id = upload_id};
    struct retry_op op = {"mpu abort", key, retry_mpu_abort_once, &a, 0};

    return retry_run(st, &op);
}

/* ---- open ---- */

static int retry_open(struct tfs_store *st, const char *location)
{
    struct retry_priv *p = tfs_store_priv(st);

    (void)location;
    retry_defaults(p);
    for (size_t i = 0; i < TFS_ARRAY_LEN(retry_opts); i++) {
        const char *name = retry_opts[i].name;
        const char *v = NULL;
        int rc = tfs_store_opt_str(st, name, &v);

        if (rc == 0 && v != NULL)
            rc = tfs_opt_apply("retry", retry_opts, TFS_ARRAY_LEN(retry_opts),
                               p, name, v);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void retry_close(struct tfs_store *st)
{
    (void)st;
}

const struct tfs_store_ops tfs_retry_ops = {
    .version   = TFS_STORE_OPS_VERSION,
    .scheme    = "retry",
    .priv_size = sizeof(struct retry_priv),
    .caps      = TFS_SCAP_WRAPPER,
    .open      = retry_open,
    .close     = retry_close,
    .stat      = retry_stat,
    .read_ex   = retry_read,
    .list      = retry_list,
    .put       = retry_put,
    .remove    = retry_remove,
    .copy      = retry_copy,
    .rename    = retry_rename,
    .part_size = retry_part_size,
    .mpu_create = retry_mpu_create,
    .mpu_part  = retry_mpu_part,
    .mpu_complete = retry_mpu_complete,
    .mpu_abort = retry_mpu_abort,
};

/* ---- public function ---- */

void tfs_retry_get_stats(struct tfs_store *st, struct tfs_retry_stats *out)
{
    struct tfs_store *r = tfs_store_find(st, "retry");
    struct retry_priv *p;

    memset(out, 0, sizeof(*out));
    if (r == NULL)
        return;
    p = tfs_store_priv(r);
    out->calls = atomic_load(&p->n_calls);
    out->retries = atomic_load(&p->n_retries);
    out->giveups = atomic_load(&p->n_giveups);
    out->deadline_exceeded = atomic_load(&p->n_deadline);
}

/* The "retry" section of the registry: tfs_retry_stats. */
#define RETRY_METRICS(X)                                                   \
    X(U64, calls, COUNTER, COUNT, NULL,                                    \
      "operations that entered the retry layer")                           \
    X(U64, retries, COUNTER, COUNT, NULL, "attempts after the first")      \
    X(U64, giveups, COUNTER, COUNT, NULL,                                  \
      "operations failed with their attempts exhausted")                   \
    X(U64, deadline_exceeded, COUNTER, COUNT, NULL,                        \
      "operations failed at the overall deadline")

static const struct tfs_metric retry_metric_table[] = {
#define X(...) TFS_METRIC_DESC(struct tfs_retry_stats, __VA_ARGS__)
    RETRY_METRICS(X)
#undef X
};

const struct tfs_metric_section tfs_metrics_retry = {
    .name = "retry",
    .prom_prefix = "retry_",
    .when = "mounts of a URI with retry+",
    .m = retry_metric_table,
    .n = TFS_ARRAY_LEN(retry_metric_table),
    .size = sizeof(struct tfs_retry_stats),
};

uint64_t tfs_retry_deadline_ms(struct tfs_store *st, uint64_t bytes)
{
    struct tfs_store *r = tfs_store_find(st, "retry");
    struct retry_op op = {"read", "", NULL, NULL, 0};
    struct retry_priv *p;

    if (r == NULL)
        return 0;
    p = tfs_store_priv(r);
    op.bytes = bytes > RETRY_SMALL_READ ? bytes : 0;
    return retry_plus_ms(p->deadline_ms, retry_allowance_ms(p, &op));
}
