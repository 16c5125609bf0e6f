/* SPDX-License-Identifier: MIT */
/*
 * Recovery of a locally complete, uncommitted save.
 *
 * A save reaches the LOCAL level once every staging file of the rank is
 * finished and its local manifest (rank-R.local: the rank's marker) is
 * written and fsynced last (writer.c, stage.c).  A job killed after that
 * and before the commit (the upload ran in the dead process) would lose
 * the checkpoint; here the next job commits it instead.
 *
 * Rank 0 decides: the newest step S newer than the newest committed one
 * whose finished copy (manifest, every file checked: size, header and
 * data checksums) is in its staging for this rank and world size.  With
 * several ranks it opens an attempt of S (a fresh nonce, the old abort
 * note removed) and puts ROOT/recover, "tierfs-recover 1", the run id,
 * the step (or "none") and the nonce, one a line; the other ranks poll
 * for a decision carrying their run id (a decision of an earlier job
 * carries another, so a run id is needed and nothing is recovered
 * without one).  Every rank holding S uploads its files and puts its
 * marker, and rank 0 commits, all through the commit protocol of
 * commit.c (nonce, run id, commit_timeout); a rank without S puts an
 * abort note of the attempt at once, so rank 0 gives up at its next poll
 * and nobody commits S.  Everything is bounded by commit_timeout from
 * the call.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_int.h"
#include "tierfs/log.h"

#define RC_MAGIC "tierfs-recover 1"

/* The decision: "tierfs-recover 1\nRUN\nSTEP|none\nNONCE\n". */
static int rc_put_decision(struct tfs_ckpt_writer *w, bool have,
                           uint64_t step)
{
    struct tfs_buf b;
    int rc;

    tfs_buf_init(&b, 0);
    if (have)
        rc = tfs_buf_printf(&b, RC_MAGIC "\n%s\n%" PRIu64 "\n%s\n", w->run_id,
                            step, w->attempt);
    else
        rc = tfs_buf_printf(&b, RC_MAGIC "\n%s\nnone\n-\n", w->run_id);
    if (rc == 0)
        rc = tfs_store_put(w->st, TFS_CKPT_RECOVER_KEY, b.p, b.len, NULL);
    if (rc < 0 && rc != -ENOMEM)
        rc = tfs_ckpt_err_in(rc, "rank 0: cannot put the recovery decision "
                             TFS_CKPT_RECOVER_KEY, NULL);
    tfs_buf_cleanup(&b);
    return rc;
}

/*
 * Ranks > 0: one look at the decision.  1 with *have, *step and the nonce
 * in w->attempt when it carries our run id; 0 when absent or another
 * job's.
 */
static int rc_get_decision(struct tfs_ckpt_writer *w, bool *have,
                           uint64_t *step)
{
    char *text = NULL;
    char *save = NULL;
    size_t len = 0;
    int rc = tfs_ckpt_get(w->st, TFS_CKPT_RECOVER_KEY, 4096, &text, &len);
    const char *magic;
    const char *run;
    const char *st;
    const char *nonce;

    if (rc == -ENOENT || (rc < 0 && tfs_err_is_retryable(rc)))
        return 0;
    if (rc < 0)
        return rc;
    magic = strtok_r(text, "\n", &save);
    run = strtok_r(NULL, "\n", &save);
    st = strtok_r(NULL, "\n", &save);
    nonce = strtok_r(NULL, "\n", &save);
    rc = 0;
    if (magic != NULL && strcmp(magic, RC_MAGIC) == 0 && run != NULL &&
        strcmp(run, w->run_id) == 0 && st != NULL && nonce != NULL) {
        rc = 1;
        *have = strcmp(st, "none") != 0;
        if (*have) {
            char *end = NULL;

            *step = strtoull(st, &end, 10);
            if (end == st || *end != '\0')
                rc = tfs_err(TFS_EFORMAT, "%s: bad step '%s'",
                             TFS_CKPT_RECOVER_KEY, st);
        }
        snprintf(w->attempt, sizeof(w->attempt), "%s", nonce);
    }
    tfs_free(text);
    return rc;
}

/* STAGING/<ns>/step-N into b. */
static int rc_step_dir(const struct tfs_ckpt_writer *w, uint64_t step,
                       struct tfs_buf *b)
{
    char name[32];

    tfs_ckpt_step_name(name, sizeof(name), step);
    tfs_buf_reset(b);
    return tfs_buf_printf(b, "%s/%s", w->stage_ns, name);
}

/* Load and check this rank's manifest of step into m. */
static int rc_load(const struct tfs_ckpt_writer *w, uint64_t step,
                   struct tfs_ckpt_marker *m)
{
    struct tfs_buf dir;
    int rc;

    tfs_buf_init(&dir, 0);
    rc = rc_step_dir(w, step, &dir);
    if (rc == 0)
        rc = tfs_ckpt_stage_load_manifest(tfs_buf_str(&dir), w->rank, m);
    if (rc == 0 && (m->step != step || m->world_size != w->world_size)) {
        rc = tfs_err(TFS_EFORMAT, "%s: a copy of step %" PRIu64 " with %u "
                     "ranks, not step %" PRIu64 " with %u",
                     tfs_buf_str(&dir), m->step, m->world_size, step,
                     w->world_size);
        tfs_ckpt_marker_cleanup(m);
    }
    tfs_buf_cleanup(&dir);
    return rc;
}

static int rc_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;

    return x > y ? -1 : x < y;
}

/* The newest committed step; *any false when there is none. */
static int rc_newest(struct tfs_store *st, bool *any, uint64_t *newest)
{
    uint64_t *v = NULL;
    size_t n = 0;
    int rc = tfs_ckpt_steps(st, 0, &v, &n);

    *any = rc == 0 && n > 0;
    if (*any)
        *newest = v[n - 1];
    tfs_free(v);
    return rc;
}

/*
 * This rank's staging steps holding a manifest, newest first (at most
 * max): a look at the local disk only.
 */
static size_t rc_local_steps(const struct tfs_ckpt_writer *w, uint64_t *v,
                             size_t max)
{
    DIR *d = opendir(w->stage_ns);
    struct tfs_buf p;
    struct dirent *e;
    struct stat sb;
    char name[32];
    size_t n = 0;

    snprintf(name, sizeof(name), TFS_CKPT_LOCAL_FMT, w->rank);
    tfs_buf_init(&p, 0);
    while (d != NULL && (e = readdir(d)) != NULL && n < max) {
        uint64_t s;

        tfs_buf_reset(&p);
        if (tfs_ckpt_step_parse(e->d_name, strlen(e->d_name), &s) &&
            tfs_buf_printf(&p, "%s/%s/%s", w->stage_ns, e->d_name,
                           name) == 0 &&
            lstat(tfs_buf_str(&p), &sb) == 0 && S_ISREG(sb.st_mode))
            v[n++] = s;
    }
    if (d != NULL)
        closedir(d);
    tfs_buf_cleanup(&p);
    qsort(v, n, sizeof(v[0]), rc_desc);
    return n;
}

/*
 * Rank 0: the newest step newer than every committed one with a finished
 * copy in this rank's staging; 1 with *step and *m, 0 when none.  The
 * store is asked only when the newest local copy is not committed (one
 * stat, then a listing): after an ordinary commit, one request.
 */
static int rc_pick(const struct tfs_ckpt_writer *w, uint64_t *step,
                   struct tfs_ckpt_marker *m)
{
    uint64_t v[1024];
    uint64_t newest = 0;
    bool any = false;
    size_t n = rc_local_steps(w, v, TFS_ARRAY_LEN(v));
    int rc;

    if (n == 0)
        return 0;
    rc = tfs_ckpt_is_committed(w->st, v[0], &any);
    if (rc < 0 || any)
        return rc;
    rc = rc_newest(w->st, &any, &newest);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n && (!any || v[i] > newest); i++) {
        rc = rc_load(w, v[i], m);
        if (rc == 0) {
            *step = v[i];
            return 1;
        }
        if (rc == -ENOMEM)
            return rc;
        tfs_log(TFS_LOG_WARNING, "ckpt: recovery skips step %" PRIu64
                " of rank %u: %s (%s)", v[i], w->rank, tfs_strerror(rc),
                tfs_errdetail());
    }
    return 0;
}

/* Turn the manifest into the writer's files, as a finished save has. */
static int rc_files(struct tfs_ckpt_writer *w, struct tfs_ckpt_marker *m)
{
    w->files = tfs_calloc(m->n_files + 1, sizeof(*w->files));
    if (w->files == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < m->n_files; i++) {
        struct wr_file *f = &w->files[i];
        const struct tfs_ckpt_file_info *fi = &m->files[i];
        size_t len = strlen(w->stage_step) + strlen(fi->name) + 2;

        w->n_files++;
        f->fd = -1;
        f->w = w;
        f->finished = true;
        snprintf(f->name, sizeof(f->name), "%s", fi->name);
        f->size = fi->size;
        f->header_size = fi->header_size;
        f->header_xxh3 = fi->header_xxh3;
        f->data_xxh3 = fi->data_xxh3;
        f->n_items = fi->n_tensors;
        f->path = tfs_malloc(len);
        if (f->path == NULL)
            return -ENOMEM;
        snprintf(f->path, len, "%s/%s", w->stage_step, fi->name);
        w->total += f->size;
    }
    w->n_finished = w->n_files;
    w->level = TFS_CKPT_LEVEL_LOCAL;
    return 0;
}

/* Set the writer up for step from its manifest m (taken over). */
static int rc_setup(struct tfs_ckpt_writer *w, uint64_t step,
                    struct tfs_ckpt_marker *m)
{
    int rc;

    w->step = step;
    w->recovered = tfs_malloc(sizeof(*m));
    if (w->recovered == NULL) {
        tfs_ckpt_marker_cleanup(m);
        return -ENOMEM;
    }
    *w->recovered = *m;
    tfs_free(w->stage_step);
    tfs_free(w->stage_ns);
    w->stage_step = w->stage_ns = NULL;
    rc = tfs_ckpt_wr_staging_paths(w);
    if (rc == 0)
        rc = rc_files(w, w->recovered);
    if (rc == 0)
        rc = tfs_ckpt_wr_pools(w);
    return rc;
}

/* Remove key under step, if there. */
static int rc_remove(struct tfs_store *st, uint64_t step, const char *name)
{
    struct tfs_buf key;
    int rc;

    tfs_buf_init(&key, 0);
    rc = tfs_ckpt_key(&key, step, name);
    if (rc == 0)
        rc = tfs_store_remove(st, tfs_buf_str(&key));
    tfs_buf_cleanup(&key);
    return rc == -ENOENT ? 0 : rc;
}

/*
 * Rank 0: decide.  1 with the writer set up for the step to recover, 0
 * when there is none (decision "none" put).
 */
static int rc_decide(struct tfs_ckpt_writer *w)
{
    struct tfs_ckpt_marker m;
    uint64_t step = 0;
    char name[32];
    int rc;
    int found = rc_pick(w, &step, &m);

    if (found < 0)
        return found;
    if (found == 0) {
        rc = w->world_size > 1 ? rc_put_decision(w, false, 0) : 0;
        return rc < 0 ? rc : 0;
    }
    rc = rc_setup(w, step, &m);
    /* A marker of ours left by the killed attempt must not be seen. */
    tfs_ckpt_marker_name(name, sizeof(name), w->rank);
    if (rc == 0)
        rc = rc_remove(w->st, step, name);
    if (rc == 0 && w->world_size > 1)
        rc = rc_remove(w->st, step, TFS_CKPT_ABORT_NAME);
    if (rc == 0 && w->world_size > 1)
        rc = tfs_ckpt_attempt_start(w->st, step, w->attempt);
    if (rc == 0 && w->world_size > 1)
        rc = rc_put_decision(w, true, step);
    return rc < 0 ? rc : 1;
}

/*
 * Ranks > 0: wait for rank 0's decision.  1 with the writer set up, 0
 * when rank 0 recovers nothing (or its decision never came: logged).
 */
static int rc_follow(struct tfs_ckpt_writer *w, uint64_t deadline_ns)
{
    struct tfs_ckpt_marker m;
    uint64_t wait_ns = 10000000;
    uint64_t step = 0;
    bool have = false;
    char name[32];
    int rc;

    while ((rc = rc_get_decision(w, &have, &step)) == 0) {
        uint64_t now = tfs_now_ns();

        if (deadline_ns != 0 && now >= deadline_ns) {
            char t[32];

            tfs_ckpt_fmt_s(t, sizeof(t), w->timeout_ms);
            tfs_err(-ETIMEDOUT, "rank %u: no recovery decision from rank 0 "
                    "for run '%s' in %s", w->rank, w->run_id, t);
            tfs_log(TFS_LOG_WARNING, "ckpt: %s", tfs_errdetail());
            return 0;
        }
        if (deadline_ns != 0)
            wait_ns = TFS_MIN(wait_ns, deadline_ns - now);
        tfs_sleep_ns(wait_ns);
        wait_ns = TFS_MIN(wait_ns * 2, 500000000ull);
    }
    if (rc < 0 || !have)
        return rc < 0 ? rc : 0;
    rc = tfs_ckpt_is_committed(w->st, step, &have);
    if (rc < 0)
        return rc;
    if (have) {
        /* Our run id, but a recovery that has ended (a second call). */
        tfs_err(-EALREADY, "rank %u: step %" PRIu64 " of the recovery "
                "decision for run '%s' is committed already", w->rank, step,
                w->run_id);
        return 0;
    }
    rc = rc_load(w, step, &m);
    if (rc == -ENOMEM)
        return rc;
    if (rc < 0) {
        /* Rank 0 must not wait for us: abort the attempt now. */
        char reason[TFS_CKPT_REASON_MAX];
        uint64_t prev;

        snprintf(reason, sizeof(reason), "step %" PRIu64 ": rank %u: "
                 "nothing to recover: %s", step, w->rank, tfs_errdetail());
        w->step = step;
        prev = tfs_ckpt_grace_begin();
        (void)tfs_ckpt_abort_put(w->st, step, w->attempt, w->rank, -ENOENT,
                                 reason);
        tfs_deadline_set(prev);
        tfs_err(-ENOENT, "%s", reason);
        tfs_log(TFS_LOG_WARNING, "ckpt: %s", reason);
        return 0;
    }
    rc = rc_setup(w, step, &m);
    tfs_ckpt_marker_name(name, sizeof(name), w->rank);
    if (rc == 0)
        rc = rc_remove(w->st, step, name);
    w->attempt[0] = '\0';               /* wr_commit reads it from step-N */
    return rc < 0 ? rc : 1;
}

int tfs_ckpt_writer_recover(struct tfs_ckpt_writer *w, const char *uri,
                            uint64_t *step)
{
    uint64_t dl;
    uint64_t prev;
    int rc;

    if (w->opened)
        return tfs_err(-EBUSY, "recover: writer already used");
    if (w->rank >= w->world_size)
        return tfs_err(TFS_EOPTION, "checkpoint writer option rank=%u: "
                       "expected below world_size %u", w->rank,
                       w->world_size);
    w->opened = true;
    w->saved = true;                    /* close waits for nothing */
    w->done = true;
    if (w->world_size > 1 && w->run_id[0] == '\0') {
        TFS_INFO("ckpt: rank %u: no run id: recovery of a save of %u ranks "
                 "needs one; nothing recovered", w->rank, w->world_size);
        return 0;
    }
    rc = tfs_ckpt_store_open(uri, w->options, true, &w->st);
    if (rc < 0)
        return rc;
    w->step = 0;
    rc = tfs_ckpt_wr_staging_paths(w);
    if (rc == 0)
        rc = tfs_ckpt_peer_open(w);
    if (rc < 0)
        return rc;
    dl = w->timeout_ms > 0 ? tfs_now_ns() + w->timeout_ms * 1000000ull : 0;
    prev = tfs_deadline_set(dl != 0 ? dl : tfs_deadline_get());
    /* A staging copy lost with its node comes back from a peer first. */
    w->deadline_ns = dl;
    rc = tfs_ckpt_peer_restore(w);
    if (rc == 0)
        rc = w->rank == 0 ? rc_decide(w) : rc_follow(w, dl);
    if (rc == 1) {
        w->deadline_ns = dl;
        w->done = false;
        rc = tfs_ckpt_wr_commit(w);
        tfs_ckpt_wr_end(w, rc);
        /*
         * Ended: a later call with this run id must not follow it, and a
         * rank still polling must end too.  So the decision becomes
         * "none", not absent: removed, a rank that had not looked yet
         * (its poll backs off to 0.5 s, and an attempt that another
         * rank aborts ends sooner) waited for a decision that would
         * never come until commit_timeout, while the others sat in the
         * resume's broadcast (python.torchrun, 1 run in 6).
         */
        if (w->rank == 0 && w->world_size > 1) {
            uint64_t g = tfs_ckpt_grace_begin();

            (void)rc_put_decision(w, false, 0);
            tfs_deadline_set(g);
        }
        if (rc == 0) {
            TFS_INFO("ckpt: rank %u recovered step %" PRIu64 " from its "
                     "local copy", w->rank, w->step);
            *step = w->step;
            rc = 1;
        } else {
            /* wr_end logged it */
            tfs_err(rc, "step %" PRIu64 " not recovered: %s", w->step,
                    w->detail);
            rc = 0;
        }
    }
    tfs_deadline_set(prev);
    return rc;
}
