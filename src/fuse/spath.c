/* SPDX-License-Identifier: MIT */
/*
 * The store path: requests that may wait on the store's metadata
 * (lookup, open, opendir, getxattr, reads of moved files).  At most
 * spath.cap FUSE threads run them at once (fs_gate_enter/leave); past
 * that a request is queued for FS_SPATH_THREADS threads of this file,
 * which hand it to the run function given at start (session.c: the
 * handler it came from), so a hung HEAD or LIST cannot take every FUSE
 * thread.  At close what is still queued is answered EIO.
 */

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "fuse/fuse_int.h"

/* This thread is a store-path thread: it may wait on the store. */
static _Thread_local bool fs_on_spath;

/*
 * May this request wait on the store here?  True on a store-path thread,
 * or while fewer than cap FUSE threads do (then fs_gate_leave after).
 */
bool fs_gate_enter(struct tfs_fs *fs)
{
    struct fs_spath *sp = &fs->spath;

    if (fs_on_spath)
        return true;
    if (atomic_fetch_add(&sp->busy, 1) < sp->cap)
        return true;
    atomic_fetch_sub(&sp->busy, 1);
    return false;
}

void fs_gate_leave(struct tfs_fs *fs)
{
    if (!fs_on_spath)
        atomic_fetch_sub(&fs->spath.busy, 1);
}

/* Hand the request to the store-path threads (EIO at close). */
static void fs_defer(struct tfs_fs *fs, const struct fs_defer *tmpl,
                     const char *name)
{
    size_t nl = name ? strlen(name) + 1 : 1;
    struct fs_defer *d = tfs_malloc(sizeof(*d) + nl);
    struct fs_spath *sp = &fs->spath;
    bool stopping;

    if (d == NULL) {
        fuse_reply_err(tmpl->req, ENOMEM);
        return;
    }
    *d = *tmpl;
    d->next = NULL;
    memcpy(d->name, name ? name : "", nl);
    pthread_mutex_lock(&sp->lock);
    stopping = sp->stopping || sp->n_threads == 0;
    if (!stopping) {
        if (sp->tail != NULL)
            sp->tail->next = d;
        else
            sp->head = d;
        sp->tail = d;
        sp->n_queued++;
        pthread_cond_signal(&sp->cond);
    }
    pthread_mutex_unlock(&sp->lock);
    if (stopping) {
        fuse_reply_err(d->req, EIO);
        tfs_free(d);
        return;
    }
    atomic_fetch_add(&fs->n.deferred, 1);
}

void fs_defer_op(struct tfs_fs *fs, enum fs_defer_op op,
                 fuse_req_t req, fuse_ino_t ino,
                 const struct fuse_file_info *fi, size_t size,
                 const char *name)
{
    struct fs_defer t = {.op = op, .req = req, .ino = ino, .size = size};

    if (fi != NULL)
        t.fi = *fi;
    fs_defer(fs, &t, name);
}

static void *fs_spath_main(void *arg)
{
    struct tfs_fs *fs = arg;
    struct fs_spath *sp = &fs->spath;

    fs_on_spath = true;
    pthread_mutex_lock(&sp->lock);
    for (;;) {
        struct fs_defer *d = sp->head;

        if (d == NULL && sp->stopping)
            break;
        if (d == NULL) {
            pthread_cond_wait(&sp->cond, &sp->lock);
            continue;
        }
        sp->head = d->next;
        if (sp->head == NULL)
            sp->tail = NULL;
        sp->n_queued--;
        pthread_mutex_unlock(&sp->lock);
        sp->run(d);
        tfs_free(d);
        pthread_mutex_lock(&sp->lock);
    }
    pthread_mutex_unlock(&sp->lock);
    return NULL;
}

/*
 * At most max_threads - max(2, max_threads / 4) FUSE threads wait on
 * the store at once: the rest stay free for what the cache can answer.
 */
int fs_spath_start(struct tfs_fs *fs, fs_defer_fn *run)
{
    struct fs_spath *sp = &fs->spath;
    unsigned reserve = TFS_MAX(2u, fs->max_threads / 4);

    sp->run = run;
    sp->cap = fs->max_threads > reserve ? fs->max_threads - reserve : 0;
    for (unsigned i = 0; i < FS_SPATH_THREADS; i++) {
        if (pthread_create(&sp->threads[i], NULL, fs_spath_main, fs) != 0)
            return tfs_err(-EAGAIN, "cannot start the store-path threads");
        sp->n_threads = i + 1;
    }
    return 0;
}

/* Answer what is still queued EIO, wait for what runs. */
void fs_spath_stop(struct tfs_fs *fs)
{
    struct fs_spath *sp = &fs->spath;
    struct fs_defer *d;

    pthread_mutex_lock(&sp->lock);
    sp->stopping = true;
    d = sp->head;
    sp->head = sp->tail = NULL;
    sp->n_queued = 0;
    pthread_cond_broadcast(&sp->cond);
    pthread_mutex_unlock(&sp->lock);
    while (d != NULL) {
        struct fs_defer *next = d->next;
        fuse_reply_err(d->req, EIO);
        tfs_free(d);
        d = next;
    }
    for (unsigned i = 0; i < sp->n_threads; i++)
        pthread_join(sp->threads[i], NULL);
    sp->n_threads = 0;
}

void fs_defer_read(struct tfs_fs *fs, fuse_req_t req, fuse_ino_t ino,
                   const struct fuse_file_info *fi, size_t size,
                   uint64_t off)
{
    struct fs_defer t = {.op = FS_OP_READ, .req = req, .ino = ino,
                         .fi = *fi, .size = size, .off = off};

    fs_defer(fs, &t, NULL);
}
