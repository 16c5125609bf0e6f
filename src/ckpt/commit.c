/* SPDX-License-Identifier: MIT */
/*
 * The store layout of checkpoints and the commit protocol.
 *
 *   ROOT/step-000100/model-rank00000-00001.safetensors   shards
 *   ROOT/step-000100/rank-00000.done                     markers
 *   ROOT/step-000100/attempt                             rank 0's nonce
 *   ROOT/step-000100/model.safetensors.index.json        the commit
 *   ROOT/latest                                          "step-000100\n"
 *
 * Each rank uploads its shards, then puts its marker.  Rank 0 waits for
 * every marker (polling the store up to a deadline), checks that the
 * files they name are there, merges them into the index and puts it: from
 * that moment the checkpoint exists.  Then `latest` moves forward (never
 * back: a slow save of an older step does not hide a newer one) and
 * retention removes the oldest committed checkpoints, index first, so a
 * removal that stops half way leaves garbage, never a damaged checkpoint.
 * The other ranks wait for the index and check that it names their
 * shards.
 *
 * A retried step must not commit a marker of an earlier attempt (its
 * checksums name shards that the retry is overwriting).  Ranks cannot
 * agree on an attempt id without a collective, so rank 0 makes one: on
 * opening a step of several ranks it puts a random nonce as
 * step-N/attempt.  Each rank reads it just before putting its marker and
 * records it there; rank 0 takes only markers with its own nonce.  A
 * rank that read the nonce of an earlier attempt (it got there before
 * rank 0 opened) sees the new one while it waits for the index and puts
 * its marker again.  A stale marker can only carry an old nonce.  This
 * holds while one writer per rank and step is alive at a time (a retry
 * starts after the earlier attempt's writers have returned or died).
 *
 * Listing: a step directory is a checkpoint if and only if it has an
 * index; `latest` is a hint that readers check against that.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_int.h"
#include "common/fsutil.h"
#include "common/hmap.h"
#include "tierfs/log.h"

/* ---- names ---- */

void tfs_ckpt_step_name(char *buf, size_t len, uint64_t step)
{
    snprintf(buf, len, "step-%06" PRIu64, step);
}

bool tfs_ckpt_step_parse(const char *s, size_t len, uint64_t *step)
{
    uint64_t v = 0;

    if (len < 6 || len > 25 || memcmp(s, "step-", 5) != 0)
        return false;
    for (size_t i = 5; i < len; i++) {
        unsigned d = (unsigned)(s[i] - '0');

        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *step = v;
    return true;
}

int tfs_ckpt_key(struct tfs_buf *b, uint64_t step, const char *name)
{
    char dir[32];

    tfs_ckpt_step_name(dir, sizeof(dir), step);
    tfs_buf_reset(b);
    return tfs_buf_printf(b, "%s/%s", dir, name);
}

void tfs_ckpt_shard_name(char *buf, size_t len, unsigned rank,
                         unsigned index)
{
    snprintf(buf, len, "model-rank%05u-%05u.safetensors", rank, index);
}

void tfs_ckpt_marker_name(char *buf, size_t len, unsigned rank)
{
    snprintf(buf, len, "rank-%05u.done", rank);
}

/* ---- opening ---- */

/*
 * Checkpoint staging is per user: /var/tmp/tierfs-ckpt-EUID (docs/ckpt.md,
 * docs/security.md).  Not $XDG_RUNTIME_DIR: that is a small tmpfs, gone at
 * logout, and kept shards are model-sized.
 */
#define CKPT_STAGING_ROOT "/var/tmp"

static void ckpt_staging_name(char *buf, size_t len)
{
    snprintf(buf, len, "tierfs-ckpt-%u", (unsigned)geteuid());
}

char *tfs_ckpt_staging_default(void)
{
    char name[64];
    char path[96];

    ckpt_staging_name(name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", CKPT_STAGING_ROOT, name);
    return tfs_strdup(path);
}

int tfs_ckpt_staging_open(const char *staging_dir, const char *sub,
                          int *out_fd)
{
    char *def = tfs_ckpt_staging_default();
    char name[64];
    struct tfs_buf b;
    int base;
    int rc;

    if (def == NULL)
        return -ENOMEM;
    ckpt_staging_name(name, sizeof(name));
    tfs_buf_init(&b, 0);
    rc = tfs_buf_printf(&b, "%s/%s", name, sub);
    if (rc == 0 && strcmp(staging_dir, def) == 0) {
        /* The default: every component below /var/tmp is checked. */
        rc = tfs_dir_open(CKPT_STAGING_ROOT, tfs_buf_str(&b), 0700, 0,
                          out_fd);
    } else if (rc == 0) {
        /* The user's own dir is the root (ours or root's, sticky if
         * others may write: /tmp will do); below it all is private.  A
         * missing one is made 0700 first. */
        rc = tfs_dir_open(staging_dir, sub, 0700, 0, out_fd);
        if (rc == -ENOENT) {
            rc = tfs_dir_open_path(staging_dir, 0700, 0, &base);
            if (rc == 0) {
                close(base);
                rc = tfs_dir_open(staging_dir, sub, 0700, 0, out_fd);
            }
        }
    }
    tfs_buf_cleanup(&b);
    tfs_free(def);
    return rc;
}

int tfs_ckpt_store_open(const char *uri, const char *options, bool create,
                        struct tfs_store **out)
{
    struct tfs_uri u;
    int rc = tfs_uri_parse(uri, &u);

    if (rc < 0)
        return rc;
    if (create && strcmp(u.schemes[u.n_schemes - 1], "file") == 0 &&
        u.location[0] != '\0')
        rc = tfs_mkdirs(u.location, 0777);
    tfs_uri_cleanup(&u);
    if (rc == 0)
        rc = tfs_store_open(out, uri, options);
    return rc;
}

/*
 * Remove the directory of an emptied step on a store with real
 * directories (posix), so listings stop showing it.  Temporary files of
 * puts that a killed writer never finished (".tierfs-tmp.*", which the
 * posix store hides from listings) go with it.
 */
static void ckpt_rmdir(struct tfs_store *st, const char *dir)
{
    const char *id = tfs_store_identity(st);
    struct tfs_buf path;
    struct dirent *e;
    DIR *d;

    if (!(tfs_store_caps(st) & TFS_SCAP_DIRS) || strncmp(id, "file://", 7))
        return;
    tfs_buf_init(&path, 0);
    if (tfs_buf_printf(&path, "%s/%s", id + 7, dir) < 0) {
        tfs_buf_cleanup(&path);
        return;
    }
    d = opendir(tfs_buf_str(&path));
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, ".tierfs-tmp.", 12) == 0)
            (void)unlinkat(dirfd(d), e->d_name, 0);
    }
    if (d != NULL)
        closedir(d);
    (void)rmdir(tfs_buf_str(&path));
    tfs_buf_cleanup(&path);
}

/* ---- small objects ---- */

/*
 * Read a whole object of unknown size: one ranged read of the first
 * CKPT_GET_FIRST bytes covers the small ones (latest, markers, most
 * indexes) in one request; a bigger one is read again whole, pinned to
 * the version a stat saw, so its two parts never mix versions.
 */
#define CKPT_GET_FIRST (256u << 10)

static int ckpt_get_pinned(struct tfs_store *st, const char *key, size_t max,
                           char **out, size_t *len)
{
    struct tfs_stat s;
    size_t n = 0;
    char *buf;
    int rc;

    for (int attempt = 0;; attempt++) {
        rc = tfs_store_stat(st, key, &s);
        if (rc < 0)
            return rc;
        if (s.size > max)
            return tfs_err(TFS_ETOOBIG, "'%s' is %" PRIu64 " bytes, over "
                           "the limit of %zu", key, s.size, max);
        buf = tfs_malloc((size_t)s.size + 1);
        if (buf == NULL)
            return -ENOMEM;
        rc = tfs_store_read(st, key, buf, (size_t)s.size, 0, s.version, &n);
        if (rc == 0 && n == s.size)
            break;
        tfs_free(buf);
        if (attempt == 3 || (rc < 0 && rc != TFS_ECHANGED))
            return rc < 0 ? rc : tfs_err(TFS_ECHANGED, "'%s' changed while "
                                         "being read", key);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

int tfs_ckpt_get(struct tfs_store *st, const char *key, size_t max,
                 char **out, size_t *len)
{
    size_t first = TFS_MIN((size_t)CKPT_GET_FIRST, max + 1);
    char *buf = tfs_malloc(first + 1);
    size_t n = 0;
    int rc;

    if (buf == NULL)
        return -ENOMEM;
    rc = tfs_store_read(st, key, buf, first, 0, NULL, &n);
    if (rc == 0 && n < first) {
        buf[n] = '\0';
        *out = buf;
        *len = n;
        return 0;
    }
    tfs_free(buf);
    if (rc < 0)
        return rc;
    return ckpt_get_pinned(st, key, max, out, len);
}

static int ckpt_put_str(struct tfs_store *st, const char *key,
                        const struct tfs_buf *b)
{
    return tfs_store_put(st, key, tfs_buf_str(b), b->len, NULL);
}

int tfs_ckpt_is_committed(struct tfs_store *st, uint64_t step, bool *yes)
{
    struct tfs_buf key;
    struct tfs_stat s;
    int rc;

    tfs_buf_init(&key, 0);
    rc = tfs_ckpt_key(&key, step, TFS_CKPT_INDEX_NAME);
    if (rc == 0)
        rc = tfs_store_stat(st, tfs_buf_str(&key), &s);
    tfs_buf_cleanup(&key);
    if (rc == -ENOENT || rc == -ENOTDIR) {
        *yes = false;
        return 0;
    }
    if (rc == 0)
        *yes = true;
    return rc;
}

/* ---- listing ---- */

struct ckpt_steps {
    struct tfs_store *st;
    unsigned          flags;
    uint64_t         *v;                /* owned */
    size_t            n;
    size_t            cap;
};

static int ckpt_steps_page(void *arg, const struct tfs_list_page *pg)
{
    struct ckpt_steps *s = arg;

    for (size_t i = 0; i < pg->n_prefixes; i++) {
        const char *p = pg->prefixes[i];
        size_t len = strlen(p);
        uint64_t step;
        bool committed;
        int rc;

        if (len == 0 || !tfs_ckpt_step_parse(p, len - 1, &step))
            continue;
        rc = tfs_ckpt_is_committed(s->st, step, &committed);
        if (rc < 0)
            return rc;
        if (committed == ((s->flags & TFS_CKPT_LIST_INCOMPLETE) != 0))
            continue;
        if (s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 16;
            uint64_t *v = tfs_realloc(s->v, cap * sizeof(*v));

            if (v == NULL)
                return -ENOMEM;
            s->v = v;
            s->cap = cap;
        }
        s->v[s->n++] = step;
    }
    return 0;
}

static int ckpt_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

int tfs_ckpt_steps(struct tfs_store *st, unsigned flags, uint64_t **v,
                   size_t *n)
{
    struct ckpt_steps s = {.st = st, .flags = flags};
    int rc = tfs_store_list_all(st, "", "/", ckpt_steps_page, &s);

    if (rc < 0) {
        tfs_free(s.v);
        return rc;
    }
    if (s.n > 1)
        qsort(s.v, s.n, sizeof(*s.v), ckpt_u64_cmp);
    *v = s.v;
    *n = s.n;
    return 0;
}

/* The step `latest` names (committed or not); -ENOENT without one. */
static int ckpt_read_latest(struct tfs_store *st, uint64_t *step)
{
    char *text;
    size_t len;
    int rc = tfs_ckpt_get(st, TFS_CKPT_LATEST_KEY, 4096, &text, &len);

    if (rc < 0)
        return rc;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' ' ||
                       text[len - 1] == '\r'))
        len--;
    if (!tfs_ckpt_step_parse(text, len, step))
        rc = tfs_err(TFS_EFORMAT, "'%s' does not name a step",
                     TFS_CKPT_LATEST_KEY);
    tfs_free(text);
    return rc;
}

int tfs_ckpt_find_latest(struct tfs_store *st, uint64_t *step,
                         bool *checked)
{
    uint64_t *v = NULL;
    uint64_t s;
    bool yes = false;
    size_t n = 0;
    int rc = ckpt_read_latest(st, &s);

    /* Trusting `latest` saves a request; the caller then finds out from
     * the index itself whether it is committed. */
    if (rc == 0 && checked != NULL) {
        *checked = false;
        *step = s;
        return 0;
    }
    if (rc == 0)
        rc = tfs_ckpt_is_committed(st, s, &yes);
    if (rc == 0 && yes) {
        *step = s;
        return 0;
    }
    if (rc < 0 && rc != -ENOENT && rc != TFS_EFORMAT)
        return rc;
    rc = tfs_ckpt_steps(st, 0, &v, &n);
    if (rc == 0 && n == 0)
        rc = tfs_err(-ENOENT, "no committed checkpoint");
    if (rc == 0)
        *step = v[n - 1];
    if (rc == 0 && checked != NULL)
        *checked = true;
    tfs_free(v);
    return rc;
}

/* ---- the commit protocol ---- */

int tfs_ckpt_put_marker(const struct tfs_ckpt_commit *c,
                        const struct tfs_ckpt_marker *m)
{
    struct tfs_buf text;
    struct tfs_buf key;
    char name[32];
    int rc;

    tfs_buf_init(&text, TFS_CKPT_JSON_MAX);
    tfs_buf_init(&key, 0);
    tfs_ckpt_marker_name(name, sizeof(name), c->rank);
    rc = tfs_ckpt_marker_write(&text, m);
    if (rc == 0)
        rc = tfs_ckpt_key(&key, c->step, name);
    if (rc == 0)
        rc = ckpt_put_str(c->st, tfs_buf_str(&key), &text);
    tfs_buf_cleanup(&text);
    tfs_buf_cleanup(&key);
    return rc;
}

/* ---- attempts ---- */

int tfs_ckpt_attempt_start(struct tfs_store *st, uint64_t step,
                           char out[TFS_CKPT_ATTEMPT_LEN])
{
    struct tfs_buf text;
    struct tfs_buf key;
    uint64_t r = 0;
    int rc;

    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = 0;
    r ^= tfs_rand_u64();
    tfs_buf_init(&text, 0);
    tfs_buf_init(&key, 0);
    rc = tfs_buf_printf(&text, "%016" PRIx64, r);
    if (rc == 0)
        rc = tfs_ckpt_key(&key, step, TFS_CKPT_ATTEMPT_NAME);
    if (rc == 0)
        rc = ckpt_put_str(st, tfs_buf_str(&key), &text);
    if (rc == 0)
        snprintf(out, TFS_CKPT_ATTEMPT_LEN, "%s", tfs_buf_str(&text));
    tfs_buf_cleanup(&text);
    tfs_buf_cleanup(&key);
    return rc;
}

int tfs_ckpt_attempt_read(struct tfs_store *st, uint64_t step,
                          char out[TFS_CKPT_ATTEMPT_LEN])
{
    struct tfs_buf key;
    char *text = NULL;
    size_t len = 0;
    int rc;

    tfs_buf_init(&key, 0);
    rc = tfs_ckpt_key(&key, step, TFS_CKPT_ATTEMPT_NAME);
    if (rc == 0)
        rc = tfs_ckpt_get(st, tfs_buf_str(&key), 64, &text, &len);
    if (rc == 0 && (len == 0 || len > 16 ||
                    strspn(text, "0123456789abcdef") != len))
        rc = tfs_err(TFS_EFORMAT, "%s is not an attempt nonce",
                     tfs_buf_str(&key));
    if (rc == 0)
        memcpy(out, text, len + 1);
    else if (rc == -ENOENT) {
        out[0] = '\0';
        rc = 0;
    }
    tfs_free(text);
    tfs_buf_cleanup(&key);
    return rc;
}

/* ---- abort notes ---- */

void tfs_ckpt_fmt_s(char *buf, size_t len, uint64_t ms)
{
    if (ms % 1000 == 0)
        snprintf(buf, len, "%" PRIu64 " s", ms / 1000);
    else
        snprintf(buf, len, "%.1f s", (double)ms / 1000.0);
}

uint64_t tfs_ckpt_grace_begin(void)
{
    return tfs_deadline_set(tfs_now_ns() + TFS_CKPT_GRACE_NS);
}

int tfs_ckpt_abort_put(struct tfs_store *st, uint64_t step,
                       const char *attempt, unsigned rank, int rc,
                       const char *reason)
{
    struct tfs_buf text;
    struct tfs_buf key;
    int prc;

    if (attempt == NULL || attempt[0] == '\0')
        return 0;                       /* no attempt: no one to tell */
    tfs_buf_init(&text, 0);
    tfs_buf_init(&key, 0);
    prc = tfs_buf_printf(&text, "%s %d %u\n%.*s\n", attempt, rc, rank,
                         TFS_CKPT_REASON_MAX - 1, reason);
    if (prc == 0)
        prc = tfs_ckpt_key(&key, step, TFS_CKPT_ABORT_NAME);
    if (prc == 0)
        prc = ckpt_put_str(st, tfs_buf_str(&key), &text);
    tfs_buf_cleanup(&text);
    tfs_buf_cleanup(&key);
    return prc;
}

int tfs_ckpt_abort_read(struct tfs_store *st, uint64_t step, int *rc,
                        unsigned *rank, char *reason,
                        char attempt_out[TFS_CKPT_ATTEMPT_LEN])
{
    char nonce[TFS_CKPT_ATTEMPT_LEN];
    struct tfs_buf key;
    char *text = NULL;
    size_t len = 0;
    char *nl;
    int code = 0;
    unsigned who = 0;
    int grc;

    tfs_buf_init(&key, 0);
    grc = tfs_ckpt_key(&key, step, TFS_CKPT_ABORT_NAME);
    if (grc == 0)
        grc = tfs_ckpt_get(st, tfs_buf_str(&key), 4096, &text, &len);
    tfs_buf_cleanup(&key);
    if (grc == -ENOENT || grc == -ENOTDIR)
        return 0;
    if (grc < 0)
        return grc;
    nl = strchr(text, '\n');
    if (nl == NULL || sscanf(text, "%16s %d %u", nonce, &code, &who) != 3 ||
        code >= 0) {
        tfs_free(text);
        return 0;                       /* not ours: treated as none */
    }
    len = strlen(nl + 1);
    while (len > 0 && nl[len] == '\n')
        len--;
    snprintf(reason, TFS_CKPT_REASON_MAX, "%.*s", (int)len, nl + 1);
    if (attempt_out != NULL)
        snprintf(attempt_out, TFS_CKPT_ATTEMPT_LEN, "%s", nonce);
    *rc = code;
    *rank = who;
    tfs_free(text);
    return 1;
}

/*
 * One look for an abort note of this attempt (mine: the nonce this rank
 * holds now): 0 when there is none, else its rc with the reason as the
 * detail.  Errors reading it count as none (the next poll looks again).
 */
static int ckpt_check_abort(const struct tfs_ckpt_commit *c,
                            const char *mine)
{
    char reason[TFS_CKPT_REASON_MAX];
    char nonce[TFS_CKPT_ATTEMPT_LEN];
    unsigned who = 0;
    int code = 0;
    int rc;

    if (mine == NULL || mine[0] == '\0')
        return 0;
    rc = tfs_ckpt_abort_read(c->st, c->step, &code, &who, reason, nonce);
    if (rc <= 0 || strcmp(nonce, mine) != 0 ||
        (c->ignore_abort != NULL && strcmp(nonce, c->ignore_abort) == 0))
        return 0;
    if (c->noted != NULL)
        *c->noted = true;
    if (who == 0 || strncmp(reason, "step ", 5) == 0)
        return tfs_err(code, "%s", reason);
    return tfs_err(code, "rank %u: %s", who, reason);
}

/* Sleep before the next poll; -ETIMEDOUT once the deadline has passed. */
static int ckpt_backoff(const struct tfs_ckpt_commit *c, uint64_t *wait_ns)
{
    uint64_t now = tfs_now_ns();

    if (c->deadline_ns != 0 && now >= c->deadline_ns)
        return -ETIMEDOUT;
    if (c->deadline_ns != 0)
        *wait_ns = TFS_MIN(*wait_ns, c->deadline_ns - now);
    tfs_sleep_ns(*wait_ns);
    *wait_ns = TFS_MIN(*wait_ns * 2, 500000000ull);
    return 0;
}

/* One poll of rank r's marker: 0 with *out, -EAGAIN while absent/stale. */
static int ckpt_try_marker(const struct tfs_ckpt_commit *c, unsigned r,
                           const char *key, struct tfs_ckpt_marker *out)
{
    char *text;
    size_t len;
    int rc = tfs_ckpt_get(c->st, key, TFS_CKPT_JSON_MAX, &text, &len);

    if (rc == -ENOENT || tfs_err_is_retryable(rc))
        return -EAGAIN;
    if (rc < 0)
        return rc;
    rc = tfs_ckpt_marker_parse(text, len, key, out);
    tfs_free(text);
    if (rc < 0)
        return rc;
    if (out->rank != r || out->step != c->step ||
        out->world_size != c->world_size ||
        (c->run_id[0] != '\0' && strcmp(out->run_id, c->run_id) != 0) ||
        (c->attempt != NULL && strcmp(out->attempt, c->attempt) != 0)) {
        tfs_ckpt_marker_cleanup(out);
        return -EAGAIN;                 /* a stale marker: wait for ours */
    }
    return 0;
}

/*
 * The objects of step-N/ with their sizes, from one listing (a request a
 * page of 1,000), in a map by key: what the markers' files are checked
 * against.  One stat per shard file cost ranks x files round trips,
 * one after the other, between the last marker and the index: 240 ms of
 * a 1.7 s save of 4 ranks at 20 ms a request.
 */
struct ckpt_obj {
    struct tfs_hstr h;                  /* key: "step-N/NAME", after us */
    uint64_t        size;
};

struct ckpt_listing {
    struct tfs_hmap objs;               /* of struct ckpt_obj */
    int             rc;                 /* -ENOMEM while collecting */
};

static int ckpt_listing_page(void *arg, const struct tfs_list_page *pg)
{
    struct ckpt_listing *l = arg;

    for (size_t i = 0; i < pg->n_entries; i++) {
        const char *k = pg->entries[i].key;
        size_t len = strlen(k);
        struct ckpt_obj *o;

        if (tfs_hmap_find_str(&l->objs, k) != NULL)
            continue;                   /* listed twice: the first counts */
        o = tfs_malloc(sizeof(*o) + len + 1);
        if (o == NULL)
            return l->rc = -ENOMEM;
        o->h.key = (char *)(o + 1);
        memcpy(o->h.key, k, len + 1);
        o->size = pg->entries[i].st.size;
        if (tfs_hmap_insert_str(&l->objs, &o->h) < 0) {
            tfs_free(o);
            return l->rc = -ENOMEM;
        }
    }
    return 0;
}

static void ckpt_listing_cleanup(struct ckpt_listing *l)
{
    struct tfs_hmap_iter it;
    struct tfs_hnode *n;

    tfs_hmap_iter_init(&it, &l->objs);
    while ((n = tfs_hmap_iter_next(&it)) != NULL)
        tfs_free(n);                    /* the node is the object's start */
    tfs_hmap_cleanup(&l->objs);
}

static int ckpt_listing_get(const struct tfs_ckpt_commit *c,
                            struct ckpt_listing *l)
{
    char dir[32];
    char prefix[40];
    int rc;

    memset(l, 0, sizeof(*l));
    if (tfs_hmap_init(&l->objs, 64, tfs_hstr_eq) < 0)
        return -ENOMEM;
    tfs_ckpt_step_name(dir, sizeof(dir), c->step);
    snprintf(prefix, sizeof(prefix), "%s/", dir);
    rc = tfs_store_list_all(c->st, prefix, NULL, ckpt_listing_page, l);
    if (rc == 0 && l->rc < 0)
        rc = l->rc;
    if (rc < 0)
        return tfs_ckpt_err_in(rc, prefix, "listing the step's files");
    return 0;
}

/* Check that the files a marker names are in the listing, at their size. */
static int ckpt_check_files(const struct tfs_ckpt_commit *c,
                            const struct tfs_ckpt_marker *m,
                            const struct ckpt_listing *l)
{
    struct tfs_buf key;
    int rc = 0;

    tfs_buf_init(&key, 0);
    for (size_t i = 0; i < m->n_files && rc == 0; i++) {
        const struct ckpt_obj *got;

        rc = tfs_ckpt_key(&key, c->step, m->files[i].name);
        if (rc < 0)
            break;
        got = (const struct ckpt_obj *)(void *)tfs_hmap_find_str(
            &l->objs, tfs_buf_str(&key));
        if (got == NULL)
            rc = tfs_err(-ENOENT, "%s: missing (named by rank %u's marker)",
                         tfs_buf_str(&key), m->rank);
        else if (got->size != m->files[i].size)
            rc = tfs_err(TFS_ECORRUPT, "%s is %" PRIu64 " bytes, rank %u's "
                         "marker says %" PRIu64, tfs_buf_str(&key),
                         got->size, m->rank, m->files[i].size);
    }
    tfs_buf_cleanup(&key);
    return rc;
}

struct ckpt_census {
    size_t   n;                         /* shard files of the rank */
    uint64_t bytes;
};

static int ckpt_census_page(void *arg, const struct tfs_list_page *pg)
{
    struct ckpt_census *w = arg;

    for (size_t i = 0; i < pg->n_entries; i++) {
        w->n++;
        w->bytes += pg->entries[i].st.size;
    }
    return 0;
}

/* Which ranks have a marker object at all (whatever attempt). */
struct ckpt_present {
    bool    *has;                       /* world_size flags */
    unsigned n;
};

static int ckpt_present_page(void *arg, const struct tfs_list_page *pg)
{
    struct ckpt_present *w = arg;

    for (size_t i = 0; i < pg->n_entries; i++) {
        const char *k = strrchr(pg->entries[i].key, '/');
        unsigned r;
        char end;

        if (k != NULL && sscanf(k + 1, "rank-%5u.don%c", &r, &end) == 2 &&
            end == 'e' && r < w->n)
            w->has[r] = true;
    }
    return 0;
}

/*
 * ", nor ranks 3, 7 (2 more of 8)": the ranks after r without a marker
 * object, from one listing of the markers; "" when none or unknown.
 */
static void ckpt_also_missing(const struct tfs_ckpt_commit *c, unsigned r,
                              const char *dir, char *buf, size_t len)
{
    struct ckpt_present w = {tfs_calloc(c->world_size, sizeof(bool)),
                             c->world_size};
    struct tfs_buf b;
    char prefix[48];
    unsigned n = 0;

    buf[0] = '\0';
    snprintf(prefix, sizeof(prefix), "%s/rank-", dir);
    if (w.has == NULL || r + 1 >= c->world_size ||
        tfs_store_list_all(c->st, prefix, NULL, ckpt_present_page, &w) < 0) {
        tfs_free(w.has);
        return;
    }
    tfs_buf_init(&b, 0);
    for (unsigned k = r + 1; k < c->world_size; k++) {
        if (w.has[k])
            continue;
        if (n < 8)
            (void)tfs_buf_printf(&b, "%s%u", n ? ", " : "", k);
        n++;
    }
    if (n > 0)
        snprintf(buf, len, "; nor rank%s %s%s (%u more of %u)",
                 n > 1 ? "s" : "", tfs_buf_str(&b), n > 8 ? ", ..." : "", n,
                 c->world_size);
    tfs_buf_cleanup(&b);
    tfs_free(w.has);
}

/*
 * Rank 0 gave up on rank r's marker: say so, with what of rank r's is in
 * the store (one listing of its shard names) and which later ranks have
 * no marker either (one listing of the markers), under a short deadline
 * of its own since the commit's has passed.
 */
static int ckpt_no_marker(const struct tfs_ckpt_commit *c, unsigned r)
{
    struct ckpt_census w = {0};
    uint64_t prev = tfs_ckpt_grace_begin();
    char prefix[64];
    char more[128];
    char dir[32];
    char t[32];
    char b[32];
    int rc;

    tfs_ckpt_step_name(dir, sizeof(dir), c->step);
    snprintf(prefix, sizeof(prefix), "%s/model-rank%05u-", dir, r);
    rc = tfs_store_list_all(c->st, prefix, NULL, ckpt_census_page, &w);
    ckpt_also_missing(c, r, dir, more, sizeof(more));
    tfs_deadline_set(prev);
    tfs_ckpt_fmt_s(t, sizeof(t), c->timeout_ms);
    if (rc < 0)
        return tfs_err(-ETIMEDOUT, "step %" PRIu64 ": rank %u put no marker "
                       "in %s (its files in the store: unknown, the listing "
                       "failed: %s)%s", c->step, r, t, tfs_strerror(rc),
                       more);
    return tfs_err(-ETIMEDOUT, "step %" PRIu64 ": rank %u put no marker in "
                   "%s (in the store: %zu of its shard files, %s)%s",
                   c->step, r, t, w.n,
                   tfs_fmt_bytes(b, sizeof(b), (double)w.bytes), more);
}

static int ckpt_wait_marker(const struct tfs_ckpt_commit *c, unsigned r,
                            struct tfs_ckpt_marker *out)
{
    uint64_t wait_ns = 10000000;
    struct tfs_buf key;
    char name[32];
    int rc;

    tfs_buf_init(&key, 0);
    tfs_ckpt_marker_name(name, sizeof(name), r);
    rc = tfs_ckpt_key(&key, c->step, name);
    while (rc == 0) {
        rc = ckpt_try_marker(c, r, tfs_buf_str(&key), out);
        if (rc != -EAGAIN)
            break;
        rc = ckpt_check_abort(c, c->attempt);
        if (rc == 0 && ckpt_backoff(c, &wait_ns) < 0)
            rc = ckpt_no_marker(c, r);
    }
    tfs_buf_cleanup(&key);
    return rc;
}

static int ckpt_put_latest(struct tfs_store *st, uint64_t step)
{
    struct tfs_buf text;
    char name[32];
    int rc;

    tfs_ckpt_step_name(name, sizeof(name), step);
    tfs_buf_init(&text, 0);
    rc = tfs_buf_printf(&text, "%s\n", name);
    if (rc == 0)
        rc = ckpt_put_str(st, TFS_CKPT_LATEST_KEY, &text);
    tfs_buf_cleanup(&text);
    return rc;
}

struct ckpt_newest {
    struct tfs_store *st;
    uint64_t          step;             /* the newest committed so far */
};

static int ckpt_newest_page(void *arg, const struct tfs_list_page *pg)
{
    struct ckpt_newest *w = arg;

    for (size_t i = 0; i < pg->n_prefixes; i++) {
        size_t len = strlen(pg->prefixes[i]);
        bool yes = false;
        uint64_t step;
        int rc;

        if (len == 0 || !tfs_ckpt_step_parse(pg->prefixes[i], len - 1, &step)
            || step <= w->step)
            continue;                   /* only newer steps cost a stat */
        rc = tfs_ckpt_is_committed(w->st, step, &yes);
        if (rc < 0)
            return rc;
        if (yes)
            w->step = step;
    }
    return 0;
}

/* The newest committed step after `step`, or `step` when there is none. */
static int ckpt_newest_after(struct tfs_store *st, uint64_t step,
                             uint64_t *newest)
{
    struct ckpt_newest w = {.st = st, .step = step};
    int rc = tfs_store_list_all(st, "", "/", ckpt_newest_page, &w);

    if (rc == 0)
        *newest = w.step;
    return rc;
}

/*
 * Move `latest` to step unless it names a newer committed checkpoint.
 * The store has no conditional put, so two overlapping commits could
 * both read an old `latest` and the older step write last.  Hence, after
 * each write, look for a committed step newer than the one written and
 * write that instead, until there is none.  Every commit puts its index
 * before it gets here, so whichever writes last has looked after every
 * index put before that listing, and any index put after it belongs to
 * a commit that writes `latest` later: the last write names the newest.
 */
static int ckpt_advance_latest(struct tfs_store *st, uint64_t step)
{
    uint64_t cur;
    uint64_t newest = step;
    bool newer = false;
    int rc = ckpt_read_latest(st, &cur);

    if (rc == 0 && cur > step)
        rc = tfs_ckpt_is_committed(st, cur, &newer);
    if (rc < 0 && rc != -ENOENT && rc != TFS_EFORMAT)
        return rc;
    if (newer)
        return 0;                       /* its writer settles `latest` */
    for (;;) {
        rc = ckpt_put_latest(st, step);
        if (rc == 0)
            rc = ckpt_newest_after(st, step, &newest);
        if (rc < 0 || newest == step)
            return rc;
        step = newest;
    }
}

static int ckpt_put_index(const struct tfs_ckpt_commit *c,
                          const struct tfs_ckpt_marker *m)
{
    struct tfs_ckpt_index ix;
    struct tfs_buf text;
    struct tfs_buf key;
    int rc = tfs_ckpt_index_build(m, c->world_size, tfs_wall_ns(), &ix);

    if (rc < 0)
        return rc;
    tfs_buf_init(&text, TFS_CKPT_JSON_MAX);
    tfs_buf_init(&key, 0);
    rc = tfs_ckpt_index_write(&text, &ix);
    if (rc == 0)
        rc = tfs_ckpt_key(&key, c->step, TFS_CKPT_INDEX_NAME);
    if (rc == 0)
        rc = ckpt_put_str(c->st, tfs_buf_str(&key), &text);
    tfs_buf_cleanup(&text);
    tfs_buf_cleanup(&key);
    tfs_ckpt_index_cleanup(&ix);
    return rc;
}

int tfs_ckpt_commit_index(const struct tfs_ckpt_commit *c,
                          const struct tfs_ckpt_marker *mine)
{
    struct tfs_ckpt_marker *m = tfs_calloc(c->world_size, sizeof(*m));
    size_t removed = 0;
    int rc = 0;

    if (m == NULL)
        return -ENOMEM;
    m[0] = *mine;                       /* borrowed: not cleaned up below */
    for (unsigned r = 1; r < c->world_size && rc == 0; r++)
        rc = ckpt_wait_marker(c, r, &m[r]);
    if (rc == 0 && c->world_size > 1) {
        struct ckpt_listing l;

        rc = ckpt_listing_get(c, &l);
        for (unsigned r = 1; r < c->world_size && rc == 0; r++)
            rc = ckpt_check_files(c, &m[r], &l);
        ckpt_listing_cleanup(&l);
    }
    if (rc == 0)
        rc = ckpt_put_index(c, m);
    if (rc == 0)
        rc = ckpt_advance_latest(c->st, c->step);
    if (rc == 0 && c->keep_last > 0) {
        int rrc = tfs_ckpt_retain(c->st, c->keep_last, false, false,
                                  &removed);
        if (rrc < 0)                    /* the checkpoint is committed */
            tfs_log(TFS_LOG_WARNING, "ckpt: retention after step %" PRIu64
                    " failed: %s (%s)", c->step, tfs_strerror(rrc),
                    tfs_errdetail());
    }
    for (unsigned r = 1; r < c->world_size; r++)
        tfs_ckpt_marker_cleanup(&m[r]);
    tfs_free(m);
    return rc;
}

/* Whether index text names every file of mine with its checksums. */
static int ckpt_index_has(const char *text, size_t len, const char *what,
                          const struct tfs_ckpt_marker *mine)
{
    struct tfs_ckpt_index ix;
    int rc = tfs_ckpt_index_parse(text, len, what, &ix);

    if (rc < 0)
        return rc;
    for (size_t i = 0; i < mine->n_files && rc == 0; i++) {
        const struct tfs_ckpt_file_info *f =
            tfs_ckpt_index_file(&ix, mine->files[i].name);

        if (f == NULL || f->header_xxh3 != mine->files[i].header_xxh3 ||
            f->data_xxh3 != mine->files[i].data_xxh3 ||
            f->size != mine->files[i].size)
            rc = -EAGAIN;
    }
    tfs_ckpt_index_cleanup(&ix);
    return rc;
}

/* Rank 0 opened after we read the nonce: put our marker again. */
static int ckpt_rejoin(const struct tfs_ckpt_commit *c,
                       struct tfs_ckpt_marker *mine)
{
    char now[TFS_CKPT_ATTEMPT_LEN];
    int rc = tfs_ckpt_attempt_read(c->st, c->step, now);

    if (rc < 0)
        return tfs_err_is_retryable(rc) ? 0 : rc;
    if (now[0] == '\0' || strcmp(now, mine->attempt) == 0)
        return 0;
    memcpy(mine->attempt, now, sizeof(now));
    TFS_INFO("ckpt: rank %u joins attempt %s of step %" PRIu64, c->rank,
             now, c->step);
    rc = tfs_ckpt_put_marker(c, mine);
    return rc < 0 && tfs_err_is_retryable(rc) ? 0 : rc;
}

/*
 * The wait for the index ended at the deadline: the error.  A note that
 * was already there when this rank opened is ignored (it is taken for an
 * earlier attempt's: ckpt.md, "Abort notes"); when it still names the
 * attempt we waited on, it may just as well be this one's, aborted before
 * this rank opened, so the detail names it (one more GET, under a short
 * deadline of its own): else it reads as if no rank had failed.
 */
static int ckpt_no_index(const struct tfs_ckpt_commit *c,
                         const struct tfs_ckpt_marker *mine, const char *key,
                         int rc)
{
    char reason[TFS_CKPT_REASON_MAX];
    char nonce[TFS_CKPT_ATTEMPT_LEN];
    char note[TFS_CKPT_REASON_MAX + 160] = "";
    unsigned who = 0;
    int code = 0;
    char t[32];

    if (c->ignore_abort != NULL &&
        strcmp(c->ignore_abort, mine->attempt) == 0) {
        uint64_t prev = tfs_ckpt_grace_begin();

        if (tfs_ckpt_abort_read(c->st, c->step, &code, &who, reason,
                                nonce) > 0 &&
            strcmp(nonce, mine->attempt) == 0)
            snprintf(note, sizeof(note), "; a note of rank %u naming this "
                     "attempt predates this rank's open, taken for an "
                     "earlier attempt's: %s", who, reason);
        tfs_deadline_set(prev);
    }
    tfs_ckpt_fmt_s(t, sizeof(t), c->timeout_ms);
    return tfs_err(rc, "step %" PRIu64 ": rank %u: no index naming its "
                   "shards appeared at %s in %s (and no abort note from "
                   "rank 0%s)", c->step, c->rank, key, t, note);
}

int tfs_ckpt_await_index(const struct tfs_ckpt_commit *c0,
                         struct tfs_ckpt_marker *mine)
{
    struct tfs_ckpt_commit cc = *c0;
    const struct tfs_ckpt_commit *c = &cc;
    uint64_t wait_ns = 10000000;
    uint64_t prev = tfs_deadline_get();
    struct tfs_buf key;
    int rc;

    /* Past our own deadline, a little longer for rank 0's note. */
    if (cc.deadline_ns != 0) {
        cc.deadline_ns += cc.grace_ns;
        tfs_deadline_set(cc.deadline_ns);
    }
    tfs_buf_init(&key, 0);
    rc = tfs_ckpt_key(&key, c->step, TFS_CKPT_INDEX_NAME);
    while (rc == 0) {
        char *text;
        size_t len;

        rc = tfs_ckpt_get(c->st, tfs_buf_str(&key), TFS_CKPT_JSON_MAX,
                          &text, &len);
        if (rc == 0) {
            rc = ckpt_index_has(text, len, tfs_buf_str(&key), mine);
            tfs_free(text);
        }
        if (rc == 0 || (rc != -ENOENT && rc != -EAGAIN &&
                        !tfs_err_is_retryable(rc)))
            break;
        rc = c->world_size > 1 ? ckpt_rejoin(c, mine) : 0;
        if (rc == 0 && c->world_size > 1)
            rc = ckpt_check_abort(c, mine->attempt);
        if (rc < 0)
            break;
        rc = ckpt_backoff(c, &wait_ns);
        if (rc < 0)
            rc = ckpt_no_index(c, mine, tfs_buf_str(&key), rc);
    }
    tfs_buf_cleanup(&key);
    tfs_deadline_set(prev);
    return rc;
}

/* ---- removal and retention ---- */

struct ckpt_rm {
    struct tfs_store *st;
    size_t            n;                /* objects removed */
};

static int ckpt_rm_page(void *arg, const struct tfs_list_page *pg)
{
    struct ckpt_rm *w = arg;

    for (size_t i = 0; i < pg->n_entries; i++) {
        int rc = tfs_store_remove(w->st, pg->entries[i].key);

        if (rc < 0)
            return rc;
        w->n++;
    }
    return 0;
}

int tfs_ckpt_remove_step(struct tfs_store *st, uint64_t step)
{
    struct ckpt_rm w = {.st = st};
    struct tfs_buf key;
    char dir[32];
    int rc;

    tfs_buf_init(&key, 0);
    rc = tfs_ckpt_key(&key, step, TFS_CKPT_INDEX_NAME);
    if (rc == 0)
        rc = tfs_store_remove(st, tfs_buf_str(&key));
    tfs_ckpt_step_name(dir, sizeof(dir), step);
    if (rc == 0) {
        tfs_buf_reset(&key);
        rc = tfs_buf_printf(&key, "%s/", dir);
    }
    if (rc == 0)
        rc = tfs_store_list_all(st, tfs_buf_str(&key), NULL, ckpt_rm_page,
                                &w);
    if (rc == 0)
        ckpt_rmdir(st, dir);
    tfs_buf_cleanup(&key);
    return rc;
}

static int ckpt_remove_many(struct tfs_store *st, const uint64_t *v,
                            size_t n, bool dry_run, size_t *removed)
{
    uint64_t latest = UINT64_MAX;
    int rc = 0;

    if (ckpt_read_latest(st, &latest) < 0)
        latest = UINT64_MAX;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (v[i] == latest)
            continue;                   /* never the one latest names */
        if (!dry_run)
            rc = tfs_ckpt_remove_step(st, v[i]);
        if (rc == 0)
            (*removed)++;
    }
    return rc;
}

/* Whether step's current attempt has an abort note (a failed save). */
static int ckpt_aborted(struct tfs_store *st, uint64_t step, bool *yes)
{
    char reason[TFS_CKPT_REASON_MAX];
    char nonce[TFS_CKPT_ATTEMPT_LEN];
    char now[TFS_CKPT_ATTEMPT_LEN] = "";
    unsigned who = 0;
    int code = 0;
    int rc = tfs_ckpt_abort_read(st, step, &code, &who, reason, nonce);

    *yes = false;
    if (rc == 1)
        rc = tfs_ckpt_attempt_read(st, step, now);
    if (rc == 0 && code < 0)
        *yes = strcmp(now, nonce) == 0;
    return rc;
}

int tfs_ckpt_retain(struct tfs_store *st, unsigned keep, bool incomplete,
                    bool dry_run, size_t *removed)
{
    uint64_t *done = NULL;
    uint64_t *partial = NULL;
    size_t n_done = 0;
    size_t n_partial = 0;
    size_t cut = 0;
    int rc;

    *removed = 0;
    rc = tfs_ckpt_steps(st, 0, &done, &n_done);
    if (rc == 0 && n_done > keep)
        rc = ckpt_remove_many(st, done, n_done - keep, dry_run, removed);
    if (rc == 0 && incomplete && n_done > 0)
        rc = tfs_ckpt_steps(st, TFS_CKPT_LIST_INCOMPLETE, &partial,
                            &n_partial);
    if (rc == 0 && incomplete && n_done == 0)
        rc = tfs_ckpt_steps(st, TFS_CKPT_LIST_INCOMPLETE, &partial,
                            &n_partial);
    /* Incomplete steps older than the newest checkpoint are abandoned,
     * and so is a newer one whose current attempt was aborted. */
    for (size_t i = 0; i < n_partial && rc == 0; i++) {
        bool aborted = false;

        if (n_done == 0 || partial[i] > done[n_done - 1])
            rc = ckpt_aborted(st, partial[i], &aborted);
        if (rc == 0 && ((n_done > 0 && partial[i] < done[n_done - 1]) ||
                        aborted))
            partial[cut++] = partial[i];
    }
    if (rc == 0 && cut > 0)
        rc = ckpt_remove_many(st, partial, cut, dry_run, removed);
    tfs_free(done);
    tfs_free(partial);
    return rc;
}

/* ---- the public functions ---- */

int tfs_ckpt_list(const char *uri, const char *options, unsigned flags,
                  uint64_t *steps, size_t max, size_t *n)
{
    struct tfs_store *st;
    uint64_t *v = NULL;
    size_t count = 0;
    int rc = tfs_ckpt_store_open(uri, options, false, &st);

    if (rc < 0)
        return rc;
    rc = tfs_ckpt_steps(st, flags, &v, &count);
    if (rc == 0) {
        if (steps != NULL && v != NULL && max > 0)
            memcpy(steps, v, TFS_MIN(max, count) * sizeof(*v));
        *n = count;
    }
    tfs_free(v);
    tfs_store_close(st);
    return rc;
}

int tfs_ckpt_latest(const char *uri, const char *options, uint64_t *step)
{
    struct tfs_store *st;
    int rc = tfs_ckpt_store_open(uri, options, false, &st);

    if (rc < 0)
        return rc;
    rc = tfs_ckpt_find_latest(st, step, NULL);
    tfs_store_close(st);
    return rc;
}

int tfs_ckpt_summary(const char *uri, const char *options, uint64_t step,
                     struct tfs_ckpt_summary *out)
{
    struct tfs_ckpt_index ix;
    struct tfs_store *st;
    struct tfs_buf key;
    char *text = NULL;
    size_t len = 0;
    int rc = tfs_ckpt_store_open(uri, options, false, &st);

    if (rc < 0)
        return rc;
    tfs_buf_init(&key, 0);
    rc = tfs_ckpt_key(&key, step, TFS_CKPT_INDEX_NAME);
    if (rc == 0)
        rc = tfs_ckpt_get(st, tfs_buf_str(&key), TFS_CKPT_JSON_MAX, &text,
                          &len);
    if (rc == -ENOENT)
        rc = tfs_err(-ENOENT, "step %" PRIu64 " is not committed", step);
    if (rc == 0)
        rc = tfs_ckpt_index_parse(text, len, tfs_buf_str(&key), &ix);
    if (rc == 0) {
        memset(out, 0, sizeof(*out));
        out->step = ix.step;
        out->world_size = ix.world_size;
        out->total_size = ix.total_size;
        out->n_files = ix.n_files;
        out->n_tensors = ix.n_wm;
        out->created_ns = ix.created_ns;
        for (size_t i = 0; i < ix.n_files; i++)
            out->file_bytes += ix.files[i].size;
        tfs_ckpt_index_cleanup(&ix);
    }
    tfs_free(text);
    tfs_buf_cleanup(&key);
    tfs_store_close(st);
    return rc;
}

/* Point `latest` at the newest committed step, or remove it. */
static int ckpt_repoint_latest(struct tfs_store *st)
{
    struct tfs_buf text;
    uint64_t *v = NULL;
    size_t n = 0;
    char name[32];
    int rc = tfs_ckpt_steps(st, 0, &v, &n);

    if (rc < 0)
        return rc;
    if (n == 0) {
        tfs_free(v);
        return tfs_store_remove(st, TFS_CKPT_LATEST_KEY);
    }
    tfs_ckpt_step_name(name, sizeof(name), v[n - 1]);
    tfs_free(v);
    tfs_buf_init(&text, 0);
    rc = tfs_buf_printf(&text, "%s\n", name);
    if (rc == 0)
        rc = ckpt_put_str(st, TFS_CKPT_LATEST_KEY, &text);
    tfs_buf_cleanup(&text);
    return rc;
}

/* Whether any object lives under step's directory. */
static int ckpt_step_exists(struct tfs_store *st, uint64_t step, bool *yes)
{
    struct tfs_list_page pg;
    char dir[32];
    char prefix[40];
    int rc;

    tfs_ckpt_step_name(dir, sizeof(dir), step);
    snprintf(prefix, sizeof(prefix), "%s/", dir);
    rc = tfs_store_list(st, prefix, NULL, NULL, 1, &pg);
    if (rc < 0)
        return rc;
    *yes = pg.n_entries > 0;
    tfs_list_page_cleanup(&pg);
    return 0;
}

int tfs_ckpt_remove(const char *uri, const char *options, uint64_t step)
{
    struct tfs_store *st;
    uint64_t latest = UINT64_MAX;
    bool exists = false;
    int rc = tfs_ckpt_store_open(uri, options, false, &st);

    if (rc < 0)
        return rc;
    rc = ckpt_step_exists(st, step, &exists);
    if (rc == 0 && !exists)
        rc = tfs_err(-ENOENT, "no step %" PRIu64 " under %s", step, uri);
    if (rc == 0 && ckpt_read_latest(st, &latest) < 0)
        latest = UINT64_MAX;
    if (rc == 0)
        rc = tfs_ckpt_remove_step(st, step);
    if (rc == 0 && latest == step)
        rc = ckpt_repoint_latest(st);
    tfs_store_close(st);
    return rc;
}

int tfs_ckpt_gc(const char *uri, const char *options, unsigned keep,
                bool dry_run, size_t *removed)
{
    struct tfs_store *st;
    size_t n = 0;
    int rc;

    if (keep == 0)
        return tfs_err(-EINVAL, "gc must keep at least one checkpoint");
    rc = tfs_ckpt_store_open(uri, options, false, &st);
    if (rc < 0)
        return rc;
    rc = tfs_ckpt_retain(st, keep, true, dry_run, &n);
    if (rc == 0 && removed != NULL)
        *removed = n;
    tfs_store_close(st);
    return rc;
}

/* Whether the last part s (len bytes) names a step; sets *step. */
static bool ckpt_step_part(const char *s, size_t len, int64_t *step)
{
    uint64_t v = 0;
    size_t i = 0;

    if (len == 6 && memcmp(s, "latest", 6) == 0) {
        *step = TFS_CKPT_STEP_LATEST;
        return true;
    }
    if (tfs_ckpt_step_parse(s, len, &v)) {
        *step = (int64_t)TFS_MIN(v, (uint64_t)INT64_MAX);
        return true;
    }
    for (; i < len && i < 19 && s[i] >= '0' && s[i] <= '9'; i++)
        v = v * 10 + (uint64_t)(s[i] - '0');
    if (len == 0 || i != len)
        return false;
    *step = (int64_t)v;
    return true;
}

int tfs_ckpt_split_uri(const char *uri, char *root, size_t root_len,
                       int64_t *step)
{
    const char *q = strchr(uri, '?');
    size_t end = q != NULL ? (size_t)(q - uri) : strlen(uri);
    const char *sep = strstr(uri, "://");
    size_t floor = sep != NULL && (size_t)(sep - uri) < end
                       ? (size_t)(sep - uri) + 3 : 0;
    size_t slash;
    size_t keep;
    int n;

    while (end > floor + 1 && uri[end - 1] == '/')
        end--;
    slash = end;
    while (slash > floor && uri[slash - 1] != '/')
        slash--;
    keep = end;
    /* A bare last part counts only as "step-N" (a bucket or a relative
     * directory may well be called "100" or "latest"). */
    if ((slash > floor ||
         (floor == 0 && strncmp(uri + slash, "step-", 5) == 0)) &&
        ckpt_step_part(uri + slash, end - slash, step))
        keep = slash > floor ? slash - 1 : slash;
    else
        *step = TFS_CKPT_STEP_LATEST;
    if (keep == floor && keep < end && uri[keep] == '/')
        keep++;                         /* "/step-1": the root, "/" */
    n = snprintf(root, root_len, "%.*s%s%s", (int)keep, uri,
                 keep == 0 ? "." : "", q != NULL ? q : "");
    if (n < 0 || (size_t)n >= root_len)
        return tfs_err(-ENAMETOOLONG, "checkpoint URI too long");
    return 0;
}
