/* SPDX-License-Identifier: MIT */
/*
 * The PEER durability level: a copy of this rank's finished staging
 * files on another node of the cache group (docs/ckpt.md).
 *
 * With the writer's group options set, the writer opens the group as a
 * client of its own (no cache: group/ckpt.c), and once the level is
 * LOCAL (every file finished, the local manifest written) one thread
 * sends the files, then the manifest, to the first member in rendezvous
 * order for this rank's namespace that is not this node.  The member
 * answers only after it has checked the bytes and fsynced them, so once
 * the manifest is acknowledged the set survives this node's loss: the
 * level is PEER.  It runs beside the store upload, never in its way,
 * and goes on after the commit (a committed step's copy is what a
 * replaced node reads before the store); a failure before the commit
 * leaves the level at LOCAL and is what a wait for PEER returns.
 *
 * At resume (tfs_ckpt_writer_recover), before the recovery decision,
 * each rank asks the first two members for its copies.  When the newest
 * step they hold for this rank is not older than the newest committed
 * one and this node's staging lacks it (a replaced node, a lost disk),
 * it is fetched back into staging, every file checked against the
 * member's digest as it arrives.  The manifest goes in last, and only
 * for a step not committed yet: recovery then checks every file against
 * it (size, header and data checksums) before it commits anything.  A
 * committed step's files are the reader's, checked against the index (a
 * manifest there would let a checkpoint removed from the store be
 * recovered later).  Recovery and loading then find it as if it had
 * never left.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_int.h"
#include "group/group.h"
#include "tierfs/log.h"

#define PEER_ASK 2                      /* members asked at resume */
#define PEER_TRIES 3                    /* attempts of one file's push */

/* "NS": the staging namespace's hex, the last part of stage_ns. */
static const char *peer_ns(const struct tfs_ckpt_writer *w)
{
    const char *s = strrchr(w->stage_ns, '/');

    return s != NULL ? s + 1 : w->stage_ns;
}

/* Where this rank's copies go: "NS/rank-RRRRR". */
static void peer_place(const struct tfs_ckpt_writer *w, char *out,
                       size_t len)
{
    snprintf(out, len, "%s/" TFS_CKPT_LOCAL_FMT, peer_ns(w), w->rank);
}

int tfs_ckpt_peer_open(struct tfs_ckpt_writer *w)
{
    struct tfs_group_cfg cfg = {0};
    int rc;

    if (w->group == NULL || w->group[0] == '\0')
        return 0;
    if (w->group_secret == NULL || w->group_secret[0] == '\0')
        return tfs_err(TFS_EOPTION, "checkpoint writer option group=%s: "
                       "needs group_secret_file too", w->group);
    cfg.members = w->group;
    cfg.secret_file = w->group_secret;
    cfg.listen = w->group_self != NULL && w->group_self[0] != '\0'
                     ? w->group_self : NULL;
    cfg.self_elsewhere = cfg.listen != NULL;
    cfg.serve = false;
    cfg.timeout_ms = w->group_timeout_ms;
    cfg.tls_ca = w->group_tls_ca != NULL && w->group_tls_ca[0] != '\0'
                     ? w->group_tls_ca : NULL;
    rc = tfs_group_open(&w->group_h, &cfg, NULL);
    if (rc < 0)
        return tfs_ckpt_err_in(rc, "checkpoint peer level", NULL);
    return 0;
}

void tfs_ckpt_peer_close(struct tfs_ckpt_writer *w)
{
    tfs_pool_destroy(w->peer_pool);     /* a push still running ends */
    w->peer_pool = NULL;
    tfs_group_close(w->group_h);
    w->group_h = NULL;
}

/* ---- the push ---- */

/* Close what peer_open_all opened. */
static void peer_close_fds(struct tfs_ckpt_writer *w)
{
    for (size_t i = 0; w->peer_fds != NULL && i <= w->n_files; i++)
        if (w->peer_fds[i] >= 0)
            close(w->peer_fds[i]);
    tfs_free(w->peer_fds);
    w->peer_fds = NULL;
}

/* Send the staging file open at fd as NS/step-N/name, retried. */
static int peer_put(struct tfs_ckpt_writer *w, const char *member,
                    const char *name, int fd)
{
    struct tfs_buf key;
    char step[32];
    int rc;

    tfs_ckpt_step_name(step, sizeof(step), w->step);
    tfs_buf_init(&key, 0);
    rc = tfs_buf_printf(&key, "%s/%s/%s", peer_ns(w), step, name);
    for (int attempt = 0; rc == 0; attempt++) {
        rc = tfs_group_ckpt_put(w->group_h, member, tfs_buf_str(&key), fd,
                                w->deadline_ns);
        if (rc == 0 || attempt + 1 == PEER_TRIES ||
            (rc != -ETIMEDOUT && rc != -EPROTO))
            break;
        tfs_sleep_ns(100000000ull << attempt);
        rc = 0;
    }
    tfs_buf_cleanup(&key);
    return rc;
}

/*
 * The push ended with rc (its detail on this thread): PEER, or the error
 * a wait for PEER returns (none once the step is committed: STORE is
 * above PEER).  Wakes the waiters.
 */
static void peer_end(struct tfs_ckpt_writer *w, int rc)
{
    pthread_mutex_lock(&w->lock);
    if (rc == 0 && w->level < TFS_CKPT_LEVEL_PEER)
        w->level = TFS_CKPT_LEVEL_PEER;
    if (rc < 0 && w->level < TFS_CKPT_LEVEL_STORE) {
        w->peer_rc = rc;
        snprintf(w->peer_detail, sizeof(w->peer_detail), "step %" PRIu64
                 ": rank %u: peer copy: %s", w->step, w->rank,
                 tfs_errdetail());
    }
    w->peer_ended = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void peer_task(struct tfs_pool_task *task)
{
    struct tfs_ckpt_writer *w =
        tfs_container_of(task, struct tfs_ckpt_writer, peer_task);
    char (*m)[TFS_GROUP_KEY_MAX] = tfs_calloc(1, TFS_GROUP_KEY_MAX);
    char place[64];
    char name[32];
    uint64_t t0 = tfs_now_ns();
    uint64_t bytes = 0;
    int rc = m == NULL ? -ENOMEM : 0;

    peer_place(w, place, sizeof(place));
    if (rc == 0 && tfs_group_ckpt_members(w->group_h, place, m, 1) == 0)
        rc = tfs_err(-EHOSTUNREACH, "no other member of the group '%s' "
                     "to keep a copy (every one is this node's or "
                     "suspect)", w->group);
    for (size_t i = 0; rc == 0 && i < w->n_files; i++) {
        rc = peer_put(w, m[0], w->files[i].name, w->peer_fds[i]);
        bytes += w->files[i].size;
    }
    snprintf(name, sizeof(name), TFS_CKPT_LOCAL_FMT, w->rank);
    if (rc == 0)                        /* last: it says the set is whole */
        rc = peer_put(w, m[0], name, w->peer_fds[w->n_files]);
    peer_close_fds(w);
    peer_end(w, rc);
    if (rc == 0)
        TFS_INFO("ckpt: step %" PRIu64 ", rank %u: copy on %s (%" PRIu64
                 " bytes in %.2f s)", w->step, w->rank, m[0], bytes,
                 (double)(tfs_now_ns() - t0) / 1e9);
    else if (w->peer_rc < 0)
        tfs_log(TFS_LOG_WARNING, "ckpt: %s (%s)", w->peer_detail,
                tfs_strerror(rc));
    else
        TFS_INFO("ckpt: step %" PRIu64 ", rank %u: no copy on a peer "
                 "(the step is committed in the store): %s", w->step,
                 w->rank, tfs_errdetail());
    tfs_free(m);
}

/*
 * Open every file and the manifest now, on the thread that finished
 * them: the commit may remove the manifest (and with staging_keep 0 the
 * files) before the push reaches them, and a copy of a committed step is
 * still worth having.
 */
static int peer_open_all(struct tfs_ckpt_writer *w)
{
    char name[32];

    w->peer_fds = tfs_malloc((w->n_files + 1) * sizeof(*w->peer_fds));
    if (w->peer_fds == NULL)
        return -ENOMEM;
    for (size_t i = 0; i <= w->n_files; i++)
        w->peer_fds[i] = -1;
    for (size_t i = 0; i < w->n_files; i++) {
        w->peer_fds[i] = open(w->files[i].path, O_RDONLY | O_NOFOLLOW |
                                                    O_CLOEXEC);
        if (w->peer_fds[i] < 0)
            return tfs_err(-errno, "%s: %s", w->files[i].path,
                           strerror(errno));
    }
    snprintf(name, sizeof(name), TFS_CKPT_LOCAL_FMT, w->rank);
    w->peer_fds[w->n_files] = openat(w->stage_fd, name, O_RDONLY |
                                                       O_NOFOLLOW | O_CLOEXEC);
    if (w->peer_fds[w->n_files] < 0)
        return tfs_err(-errno, "%s/%s: %s", w->stage_step, name,
                       strerror(errno));
    return 0;
}

void tfs_ckpt_peer_start(struct tfs_ckpt_writer *w)
{
    int rc;

    if (w->group_h == NULL)
        return;
    rc = w->peer_pool == NULL ? tfs_pool_create(&w->peer_pool, 1) : 0;
    w->peer_task.fn = peer_task;
    if (rc == 0 && (rc = peer_open_all(w)) < 0)
        tfs_log(TFS_LOG_WARNING, "ckpt: step %" PRIu64 ", rank %u: no copy "
                "on a peer: %s", w->step, w->rank, tfs_errdetail());
    else if (rc == 0 && (rc = tfs_pool_submit(w->peer_pool,
                                              &w->peer_task)) < 0)
        tfs_err(rc, "cannot start its thread");
    if (rc < 0) {
        peer_close_fds(w);
        peer_end(w, rc);
    }
}

/* ---- the restore ---- */

int tfs_ckpt_peer_newest(const char *text, const char *name, uint64_t *step)
{
    const char *p = strchr(text, '\n');
    int found = 0;

    if (strncmp(text, "tierfs-ckpt-list 1\n", 19) != 0)
        return tfs_err(TFS_EFORMAT, "not a list of checkpoint copies");
    while (p != NULL && *++p != '\0') {
        const char *sp = strchr(p, ' ');
        const char *nl = strchr(p, '\n');
        size_t nlen = strlen(name);
        uint64_t s;

        if (sp == NULL || nl == NULL || sp > nl)
            return tfs_err(TFS_EFORMAT, "a bad line in a list of "
                           "checkpoint copies");
        if (tfs_ckpt_step_parse(p, (size_t)(sp - p), &s) &&
            strncmp(sp + 1, name, nlen) == 0 && sp[1 + nlen] == ' ' &&
            (!found || s > *step)) {
            *step = s;
            found = 1;
        }
        p = nl;
    }
    return found;
}

/* Fetch NS/step-N/name from member into dfd's tmp, then rename it. */
static int peer_fetch(struct tfs_ckpt_writer *w, const char *member,
                      uint64_t step, int dfd, const char *name,
                      uint64_t max, bool install)
{
    struct tfs_buf key;
    struct tfs_buf tmp;
    char sn[32];
    uint64_t got = 0;
    int fd = -1;
    int rc;

    tfs_ckpt_step_name(sn, sizeof(sn), step);
    tfs_buf_init(&key, 0);
    tfs_buf_init(&tmp, 0);
    rc = tfs_buf_printf(&key, "%s/%s/%s", peer_ns(w), sn, name);
    if (rc == 0)
        rc = tfs_buf_printf(&tmp, ".%s.peer.tmp", name);
    if (rc == 0) {
        (void)unlinkat(dfd, tfs_buf_str(&tmp), 0);
        fd = openat(dfd, tfs_buf_str(&tmp), O_RDWR | O_CREAT | O_EXCL |
                                                O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            rc = tfs_err(-errno, "staging %s: cannot create %s", sn,
                         tfs_buf_str(&tmp));
    }
    if (rc == 0)
        rc = tfs_group_ckpt_get(w->group_h, member, tfs_buf_str(&key), fd,
                                max, w->deadline_ns, &got);
    if (rc == 0 && fsync(fd) < 0)
        rc = tfs_err(-errno, "staging %s: fsync of %s", sn,
                     tfs_buf_str(&tmp));
    if (fd >= 0)
        close(fd);
    if (rc == 0 && install &&
        renameat(dfd, tfs_buf_str(&tmp), dfd, name) < 0)
        rc = tfs_err(-errno, "staging %s: rename to %s", sn, name);
    if (rc < 0 || install)
        (void)unlinkat(dfd, tfs_buf_str(&tmp), 0);
    tfs_buf_cleanup(&key);
    tfs_buf_cleanup(&tmp);
    return rc;
}

/* Read the fetched manifest's tmp (in dfd) and parse it. */
static int peer_read_manifest(int dfd, const char *name,
                              struct tfs_ckpt_marker *m)
{
    char tmp[48];
    struct stat sb;
    char *text = NULL;
    size_t got = 0;
    int fd;
    int rc;

    snprintf(tmp, sizeof(tmp), ".%s.peer.tmp", name);
    fd = openat(dfd, tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    rc = fstat(fd, &sb) < 0 ? -errno : 0;
    if (rc == 0 && (text = tfs_malloc((size_t)sb.st_size + 1)) == NULL)
        rc = -ENOMEM;
    if (rc == 0)
        rc = tfs_pread_full(fd, text, (size_t)sb.st_size, 0, &got);
    close(fd);
    if (rc == 0 && got != (size_t)sb.st_size)
        rc = -EIO;
    if (rc == 0) {
        text[sb.st_size] = '\0';
        rc = tfs_ckpt_marker_parse(text, (size_t)sb.st_size, name, m);
    }
    tfs_free(text);
    return rc;
}

/* Whether staging file fi is there at its size (checked fully later). */
static bool peer_have(int dfd, const struct tfs_ckpt_file_info *fi)
{
    struct stat sb;

    return fstatat(dfd, fi->name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
           S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == fi->size;
}

/*
 * Bring step back from member into staging: the manifest (into its tmp),
 * then every file it names that is not here at its size, each checked
 * against the member's digest as it arrives.  The manifest is installed
 * last, and only for a step not committed; the full check of every file
 * against it is recovery's (rc_load), and the reader checks a committed
 * step's files against the index, so nothing is hashed twice here.
 */
static int peer_bring(struct tfs_ckpt_writer *w, const char *member,
                      uint64_t step, bool committed)
{
    struct tfs_ckpt_marker m = {0};
    char sn[32];
    char name[32];
    char tmp[48];
    struct tfs_buf sub;
    uint64_t bytes = 0;
    size_t fetched = 0;
    uint64_t t0 = tfs_now_ns();
    int dfd = -1;
    int rc;

    tfs_ckpt_step_name(sn, sizeof(sn), step);
    snprintf(name, sizeof(name), TFS_CKPT_LOCAL_FMT, w->rank);
    snprintf(tmp, sizeof(tmp), ".%s.peer.tmp", name);
    tfs_buf_init(&sub, 0);
    rc = tfs_buf_printf(&sub, "%s/%s", peer_ns(w), sn);
    if (rc == 0)
        rc = tfs_ckpt_staging_open(w->staging_dir, tfs_buf_str(&sub), &dfd);
    if (rc == 0)
        rc = peer_fetch(w, member, step, dfd, name, TFS_CKPT_JSON_MAX,
                        false);
    if (rc == 0)
        rc = peer_read_manifest(dfd, name, &m);
    if (rc == 0 && (m.rank != w->rank || m.step != step ||
                    m.world_size != w->world_size))
        rc = tfs_err(TFS_EFORMAT, "%s of %s: rank %u, step %" PRIu64
                     ", %u ranks; wanted rank %u, step %" PRIu64 ", %u",
                     name, member, m.rank, m.step, m.world_size, w->rank,
                     step, w->world_size);
    for (size_t i = 0; rc == 0 && i < m.n_files; i++) {
        if (peer_have(dfd, &m.files[i]))
            continue;
        rc = peer_fetch(w, member, step, dfd, m.files[i].name,
                        m.files[i].size, true);
        bytes += m.files[i].size;
        fetched++;
    }
    if (rc == 0 && !committed && renameat(dfd, tmp, dfd, name) < 0)
        rc = tfs_err(-errno, "staging %s: rename to %s", sn, name);
    (void)unlinkat(dfd, tmp, 0);
    if (rc == 0 && fsync(dfd) < 0)
        rc = tfs_err(-errno, "staging %s: fsync", sn);
    if (rc == 0 && fetched > 0)
        TFS_INFO("ckpt: rank %u: %s (%s) fetched back from %s: %zu files, "
                 "%" PRIu64 " bytes in %.2f s", w->rank, sn, committed
                 ? "committed" : "not committed", member, fetched, bytes,
                 (double)(tfs_now_ns() - t0) / 1e9);
    if (dfd >= 0)
        close(dfd);
    tfs_buf_cleanup(&sub);
    tfs_ckpt_marker_cleanup(&m);
    return rc;
}

int tfs_ckpt_peer_restore(struct tfs_ckpt_writer *w)
{
    char (*m)[TFS_GROUP_KEY_MAX] = NULL;
    char place[64];
    char name[32];
    struct tfs_buf p;
    struct stat sb;
    uint64_t best = 0;
    uint64_t *v = NULL;
    size_t n = 0;
    size_t k;
    long who = -1;
    int rc = 0;

    if (w->group_h == NULL)
        return 0;
    m = tfs_calloc(PEER_ASK, TFS_GROUP_KEY_MAX);
    if (m == NULL)
        return -ENOMEM;
    peer_place(w, place, sizeof(place));
    snprintf(name, sizeof(name), TFS_CKPT_LOCAL_FMT, w->rank);
    k = tfs_group_ckpt_members(w->group_h, place, m, PEER_ASK);
    for (size_t i = 0; i < k; i++) {
        char *text = NULL;
        size_t len = 0;
        uint64_t s = 0;
        int found = tfs_group_ckpt_list(w->group_h, m[i], peer_ns(w),
                                        w->deadline_ns, &text, &len);

        if (found == 0)
            found = tfs_ckpt_peer_newest(text, name, &s);
        if (found < 0)
            TFS_INFO("ckpt: rank %u: no list of copies from %s: %s",
                     w->rank, m[i], tfs_errdetail());
        if (found > 0 && (who < 0 || s > best)) {
            best = s;
            who = (long)i;
        }
        tfs_free(text);
    }
    tfs_buf_init(&p, 0);
    /* This node's own copy is the fastest: nothing to bring. */
    if (who >= 0 && tfs_buf_printf(&p, "%s/step-%06" PRIu64 "/%s",
                                   w->stage_ns, best, name) == 0 &&
        lstat(tfs_buf_str(&p), &sb) == 0)
        who = -1;
    tfs_buf_cleanup(&p);
    if (who >= 0)
        rc = tfs_ckpt_steps(w->st, 0, &v, &n);
    if (rc < 0)
        who = -1;                       /* the caller meets it again */
    if (who >= 0 && (n == 0 || v[n - 1] <= best)) {
        rc = peer_bring(w, m[who], best, n > 0 && v[n - 1] == best);
        if (rc < 0)
            tfs_log(TFS_LOG_WARNING, "ckpt: rank %u: step %" PRIu64 " not "
                    "fetched back from %s: %s (%s)", w->rank, best, m[who],
                    tfs_strerror(rc), tfs_errdetail());
    }
    tfs_free(v);
    tfs_free(m);
    return rc == -ENOMEM ? rc : 0;
}
