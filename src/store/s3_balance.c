/* SPDX-License-Identifier: MIT */
/*
 * The endpoints of one s3 store (several gateways of the same store, as
 * AWS_ENDPOINT_URL=http://a:7480,http://b:7480 lists them) and the
 * client-side balancer over them (docs/s3.md, "Several gateways").
 *
 * Each request goes to the endpoint up with the fewest requests in
 * flight, ties in turn.  A request that fails there (connect error,
 * timeout, reset, a 5xx) ejects the endpoint: it is skipped for a
 * back-off that doubles from 1 s to 30 s while it keeps failing.  A
 * health thread sends a cheap request (tfs_s3_probe: HEAD of the bucket)
 * when a back-off ends, and brings the endpoint back when it answers.  So
 * the retry layer's next attempt of a failed request lands on another
 * endpoint.  With every endpoint down, requests still go out, to the one
 * whose back-off ends first: the store's errors reach the caller at once.
 *
 * The file is divided into: set-up, picking and ejecting (pure logic on
 * a time the caller passes, unit-tested in tests/unit/test_s3_balance.c),
 * the health thread, and the "endpoints" metrics section.
 */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "store/s3_int.h"

#define BAL_NS_PER_MS 1000000ull

/* ---- set-up ---- */

int tfs_s3_bal_init(struct s3_bal *b, unsigned n)
{
    pthread_condattr_t ca;

    assert(n >= 1 && n <= S3_MAX_ENDPOINTS);
    memset(b, 0, sizeof(*b));
    b->ep = tfs_calloc(n, sizeof(*b->ep));
    if (b->ep == NULL)
        return -ENOMEM;
    b->n = n;
    b->base_ms = S3_EJECT_BASE_MS;
    b->max_ms = S3_EJECT_MAX_MS;
    pthread_mutex_init(&b->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cond, &ca);
    pthread_condattr_destroy(&ca);
    return 0;
}

void tfs_s3_bal_cleanup(struct s3_bal *b)
{
    if (b->ep == NULL)
        return;                         /* never set up */
    assert(!b->started);
    for (unsigned i = 0; i < b->n; i++) {
        tfs_free(b->ep[i].name);
        tfs_free(b->ep[i].base_url);
        tfs_free(b->ep[i].base_path);
        tfs_free(b->ep[i].host);
    }
    tfs_free(b->ep);
    b->ep = NULL;
    pthread_cond_destroy(&b->cond);
    pthread_mutex_destroy(&b->lock);
}

/* ---- picking and ejecting (under b->lock) ---- */

/* Of the endpoints up, the one with the fewest in flight, looking from
   b->rr on so that ties go in turn; b->n when none is up. */
static unsigned bal_best_up(const struct s3_bal *b)
{
    unsigned best = b->n;

    for (unsigned k = 0; k < b->n; k++) {
        unsigned i = (b->rr + k) % b->n;

        if (b->ep[i].down)
            continue;
        if (best == b->n || b->ep[i].outstanding < b->ep[best].outstanding)
            best = i;
    }
    return best;
}

/* Every endpoint is down: the one whose back-off ends first. */
static unsigned bal_first_back(const struct s3_bal *b)
{
    unsigned best = b->rr % b->n;

    for (unsigned k = 1; k < b->n; k++) {
        unsigned i = (b->rr + k) % b->n;

        if (b->ep[i].down_until_ns < b->ep[best].down_until_ns)
            best = i;
    }
    return best;
}

unsigned tfs_s3_bal_pick(struct s3_bal *b, uint64_t now_ns)
{
    unsigned best;

    pthread_mutex_lock(&b->lock);
    best = bal_best_up(b);
    if (best == b->n)
        best = bal_first_back(b);
    b->rr = (best + 1) % b->n;
    b->ep[best].outstanding++;
    b->ep[best].last_pick_ns = now_ns;
    pthread_mutex_unlock(&b->lock);
    atomic_fetch_add_explicit(&b->ep[best].n_requests, 1,
                              memory_order_relaxed);
    return best;
}

/* Mark e down.  The back-off starts at base_ms after a quiet spell (up
   for 2 * max_ms), and otherwise doubles the last one: a gateway that
   flaps is tried less and less often. */
static void bal_eject(struct s3_bal *b, struct s3_ep *e, uint64_t now_ns)
{
    bool quiet = e->ejected_ns == 0 ||
                 now_ns - e->up_ns >= 2 * b->max_ms * BAL_NS_PER_MS;

    e->backoff_ms = quiet ? b->base_ms
                          : TFS_MIN(2 * e->backoff_ms, b->max_ms);
    e->down = true;
    e->ejected_ns = now_ns;
    e->down_until_ns = now_ns + e->backoff_ms * BAL_NS_PER_MS;
    atomic_fetch_add_explicit(&e->n_ejections, 1, memory_order_relaxed);
    pthread_cond_signal(&b->cond);      /* the health thread's next wake */
}

/* e, down, failed again after its back-off: double it. */
static void bal_extend(const struct s3_bal *b, struct s3_ep *e,
                       uint64_t now_ns)
{
    e->backoff_ms = TFS_MIN(2 * e->backoff_ms, b->max_ms);
    e->down_until_ns = now_ns + e->backoff_ms * BAL_NS_PER_MS;
}

static void bal_up(struct s3_ep *e, uint64_t now_ns)
{
    e->down = false;
    e->down_ns += now_ns - e->ejected_ns;
    e->up_ns = now_ns;
}

void tfs_s3_bal_done(struct s3_bal *b, unsigned i,
                     const struct s3_ep_result *r, uint64_t now_ns)
{
    struct s3_ep *e = &b->ep[i];

    tfs_hist_add(&e->latency, now_ns - r->t0_ns);
    atomic_fetch_add_explicit(&e->bytes_in, r->bytes_in,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&e->bytes_out, r->bytes_out,
                              memory_order_relaxed);
    if (r->failed)
        atomic_fetch_add_explicit(&e->n_errors, 1, memory_order_relaxed);
    pthread_mutex_lock(&b->lock);
    assert(e->outstanding > 0);
    e->outstanding--;
    if (r->failed && !e->down)
        bal_eject(b, e, now_ns);
    else if (r->failed && now_ns >= e->down_until_ns && !e->probing)
        bal_extend(b, e, now_ns);
    else if (!r->failed && e->down && r->t0_ns >= e->ejected_ns)
        bal_up(e, now_ns);              /* sent while down, and answered */
    pthread_mutex_unlock(&b->lock);
}

/* A health check due now, or the wait until the next (UINT64_MAX: none
   is down). */
static bool bal_due_locked(struct s3_bal *b, uint64_t now_ns, unsigned *i,
                           uint64_t *wait_ns)
{
    *wait_ns = UINT64_MAX;
    for (unsigned k = 0; k < b->n; k++) {
        struct s3_ep *e = &b->ep[k];

        if (!e->down || e->probing)
            continue;
        if (now_ns >= e->down_until_ns) {
            e->probing = true;
            *i = k;
            atomic_fetch_add_explicit(&e->n_probes, 1, memory_order_relaxed);
            return true;
        }
        *wait_ns = TFS_MIN(*wait_ns, e->down_until_ns - now_ns);
    }
    return false;
}

bool tfs_s3_bal_probe_due(struct s3_bal *b, uint64_t now_ns, unsigned *i,
                          uint64_t *wait_ns)
{
    bool due;

    pthread_mutex_lock(&b->lock);
    due = bal_due_locked(b, now_ns, i, wait_ns);
    pthread_mutex_unlock(&b->lock);
    return due;
}

static void bal_probed_locked(struct s3_bal *b, unsigned i, bool ok,
                              uint64_t now_ns)
{
    struct s3_ep *e = &b->ep[i];

    e->probing = false;
    if (ok && e->down)
        bal_up(e, now_ns);
    else if (!ok && e->down)
        bal_extend(b, e, now_ns);
}

void tfs_s3_bal_probed(struct s3_bal *b, unsigned i, bool ok,
                       uint64_t now_ns)
{
    pthread_mutex_lock(&b->lock);
    bal_probed_locked(b, i, ok, now_ns);
    pthread_mutex_unlock(&b->lock);
}

/* ---- the health thread ---- */

/* Sleep on b->cond for wait_ns (forever: UINT64_MAX), or until woken. */
static void bal_wait(struct s3_bal *b, uint64_t now_ns, uint64_t wait_ns)
{
    uint64_t until = now_ns + wait_ns;
    struct timespec ts = {
        .tv_sec = (time_t)(until / 1000000000u),
        .tv_nsec = (long)(until % 1000000000u),
    };

    if (wait_ns == UINT64_MAX)
        pthread_cond_wait(&b->cond, &b->lock);
    else
        pthread_cond_timedwait(&b->cond, &b->lock, &ts);
}

static void *bal_main(void *arg)
{
    struct s3_bal *b = arg;

    pthread_mutex_lock(&b->lock);
    while (!b->stop) {
        uint64_t now = tfs_now_ns();
        uint64_t wait_ns;
        unsigned i;
        bool ok;

        if (!bal_due_locked(b, now, &i, &wait_ns)) {
            bal_wait(b, now, wait_ns);
            continue;
        }
        pthread_mutex_unlock(&b->lock);  /* never held across I/O */
        ok = b->probe(b->probe_arg, i);
        pthread_mutex_lock(&b->lock);
        bal_probed_locked(b, i, ok, tfs_now_ns());
    }
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

int tfs_s3_bal_start(struct s3_bal *b, s3_probe_fn *probe, void *arg)
{
    assert(!b->started);
    b->probe = probe;
    b->probe_arg = arg;
    b->stop = false;
    if (pthread_create(&b->thread, NULL, bal_main, b) != 0)
        return tfs_err(-EAGAIN, "s3: cannot start the endpoints' health "
                       "thread");
    b->started = true;
    return 0;
}

void tfs_s3_bal_stop(struct s3_bal *b)
{
    if (!b->started)
        return;
    pthread_mutex_lock(&b->lock);
    b->stop = true;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
    pthread_join(b->thread, NULL);
    b->started = false;
}

/* ---- the "endpoints" metrics section ---- */

void tfs_s3_bal_metrics(struct s3_bal *b, unsigned i, uint64_t now_ns,
                        struct tfs_s3_ep_metrics *out)
{
    struct s3_ep *e = &b->ep[i];
    uint64_t down_ns;

    pthread_mutex_lock(&b->lock);
    out->up = !e->down;
    out->outstanding = e->outstanding;
    down_ns = e->down_ns + (e->down ? now_ns - e->ejected_ns : 0);
    pthread_mutex_unlock(&b->lock);
    out->down_seconds = (double)down_ns / 1e9;
    out->requests = atomic_load_explicit(&e->n_requests,
                                         memory_order_relaxed);
    out->bytes_in = atomic_load_explicit(&e->bytes_in, memory_order_relaxed);
    out->bytes_out = atomic_load_explicit(&e->bytes_out,
                                          memory_order_relaxed);
    out->errors = atomic_load_explicit(&e->n_errors, memory_order_relaxed);
    out->ejections = atomic_load_explicit(&e->n_ejections,
                                          memory_order_relaxed);
    out->probes = atomic_load_explicit(&e->n_probes, memory_order_relaxed);
    out->latency = &e->latency;
}

size_t tfs_s3_endpoint_metrics(struct tfs_store *st,
                               struct tfs_s3_ep_metrics *out,
                               const char **keys, size_t max)
{
    struct tfs_store *s3 = tfs_store_find(st, "s3");
    struct s3_priv *p;
    uint64_t now = tfs_now_ns();
    size_t n;

    if (s3 == NULL)
        return 0;
    p = tfs_store_priv(s3);
    n = TFS_MIN((size_t)p->bal.n, max);
    for (size_t i = 0; i < n; i++) {
        tfs_s3_bal_metrics(&p->bal, (unsigned)i, now, &out[i]);
        keys[i] = p->bal.ep[i].name;
    }
    return n;
}

static const struct tfs_metric s3_ep_metric_table[] = {
#define X(...) TFS_METRIC_DESC(struct tfs_s3_ep_metrics, __VA_ARGS__)
    TFS_S3_EP_METRICS(X)
#undef X
};

const struct tfs_metric_section tfs_metrics_endpoint = {
    .name = "endpoints",
    .prom_prefix = "s3_endpoint_",
    .when = "a mount of an s3:// store: a table, one row per endpoint "
             "(label `endpoint`)",
    .m = s3_ep_metric_table,
    .n = TFS_ARRAY_LEN(s3_ep_metric_table),
    .size = sizeof(struct tfs_s3_ep_metrics),
    .label = "endpoint",
};
