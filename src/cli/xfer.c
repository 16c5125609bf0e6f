/* SPDX-License-Identifier: MIT */
/*
 * Parallel ranged reads for get and cat.  A single stream from an object
 * store is latency-bound, so several ranged GETs in flight is what makes a
 * download run at the link's speed.  Into a regular file each of the jobs
 * threads writes its own chunks in place (pwrite), so no thread copies
 * another's bytes; into a pipe or terminal they fill a ring of 2*jobs
 * slots that the calling thread writes out in order.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"

struct xfer_slot {
    unsigned char *buf;                 /* chunk bytes, owned */
    uint64_t       index;               /* chunk number held */
    size_t         got;                 /* bytes read */
    bool           ready;               /* filled, waiting to be written */
};

struct xfer {
    struct tfs_store *st;
    const char       *key;
    const char       *version;
    uint64_t          off;              /* first byte of the range */
    uint64_t          len;              /* bytes in the range */
    uint64_t          chunk;
    uint64_t          n_chunks;
    size_t            n_slots;
    struct xfer_slot *slots;            /* n_slots */
    int               fd;
    int               dfd;              /* fd reopened O_DIRECT, or -1 */
    off_t             base;             /* file offset of off; -1: a stream */
    pthread_mutex_t   lock;
    pthread_cond_t    cond;
    unsigned          n_workers;        /* protected by lock */
    uint64_t          next;             /* protected by lock */
    uint64_t          written;          /* chunks out; protected by lock */
    int               rc;               /* protected by lock */
    char              detail[512];      /* of rc; protected by lock */
};

/* Wait for a chunk to fetch (and its free slot); false when done. */
static bool xfer_claim(struct xfer *x, uint64_t *index)
{
    bool ok;

    pthread_mutex_lock(&x->lock);
    while (x->base < 0 && x->rc == 0 && x->next < x->n_chunks &&
           x->next >= x->written + x->n_slots)
        pthread_cond_wait(&x->cond, &x->lock);
    ok = x->rc == 0 && x->next < x->n_chunks;
    if (ok)
        *index = x->next++;
    pthread_mutex_unlock(&x->lock);
    return ok;
}

/*
 * Chunk i is in s: in place, write it to its offset.  A full chunk goes
 * through dfd (O_DIRECT), from the page-aligned slot straight to the
 * disk: no page-cache copy, nothing left for the final fsync but the
 * file's metadata, and no fresh page-cache memory (costly on a VM).  The
 * short last chunk, or any chunk where O_DIRECT is refused, goes through
 * the page cache with its writeback started at once, so the disk works
 * while the network does.
 */
static int xfer_put_in_place(struct xfer *x, struct xfer_slot *s, uint64_t i)
{
    off_t at = x->base + (off_t)(i * x->chunk);
    int dfd = __atomic_load_n(&x->dfd, __ATOMIC_RELAXED);
    int rc;

    if (dfd >= 0 && s->got == x->chunk) {
        rc = tfs_pwrite_all(dfd, s->buf, s->got, (uint64_t)at);
        if (rc != -EINVAL)
            return rc < 0 ? tfs_err(rc, "write failed") : 0;
        __atomic_store_n(&x->dfd, -1, __ATOMIC_RELAXED);   /* refused */
    }
    rc = tfs_pwrite_all(x->fd, s->buf, s->got, (uint64_t)at);
    if (rc < 0)
        return tfs_err(rc, "write failed");
    (void)sync_file_range(x->fd, at, (off_t)s->got, SYNC_FILE_RANGE_WRITE);
    return 0;
}

/*
 * A second descriptor of fd's file with O_DIRECT, when chunks can use it
 * (offsets and sizes multiples of a page; the slots are page-aligned,
 * mem.c), else -1.  Reopened through /proc so that fd keeps its flags.
 */
static int xfer_direct_fd(const struct xfer *x)
{
    char path[64];

    if (x->base < 0 || x->base % 4096 != 0 || x->chunk % 4096 != 0 ||
        x->n_chunks < 2)
        return -1;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", x->fd);
    return open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);
}

static void *xfer_worker(void *arg)
{
    struct xfer *x = arg;
    struct xfer_slot *own;
    uint64_t i;

    pthread_mutex_lock(&x->lock);
    own = &x->slots[x->n_workers++ % x->n_slots];
    pthread_mutex_unlock(&x->lock);
    while (xfer_claim(x, &i)) {
        struct xfer_slot *s = x->base >= 0 ? own : &x->slots[i % x->n_slots];
        uint64_t off = x->off + i * x->chunk;
        size_t want = (size_t)TFS_MIN(x->chunk, x->len - i * x->chunk);
        size_t got = 0;
        int rc = tfs_store_read(x->st, x->key, s->buf, want, off,
                                x->version, &got);

        if (rc == 0 && got != want)
            rc = tfs_err(TFS_ECHANGED, "'%s' ended at %llu, before the "
                         "size it had", x->key,
                         (unsigned long long)(off + got));
        s->got = got;
        if (rc == 0 && x->base >= 0)
            rc = xfer_put_in_place(x, s, i);
        pthread_mutex_lock(&x->lock);
        if (rc < 0 && x->rc == 0) {
            x->rc = rc;
            snprintf(x->detail, sizeof(x->detail), "%s", tfs_errdetail());
        }
        if (x->base >= 0) {
            x->written++;
        } else {
            s->index = i;
            s->ready = true;
        }
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
    }
    return NULL;
}

static int xfer_write_all(int fd, const unsigned char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return tfs_err(-errno, "write failed");
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void xfer_progress(const struct xfer *x, uint64_t t0, uint64_t *last)
{
    uint64_t now = tfs_now_ns();
    uint64_t done = TFS_MIN(x->written * x->chunk, x->len);
    char a[32];
    char b[32];

    if (now - *last < 500000000u)
        return;
    *last = now;
    fprintf(stderr, "\r  %s / %s  %.1f MB/s   ", tfs_fmt_bytes(a, 32, done),
            tfs_fmt_bytes(b, 32, (double)x->len),
            (double)done * 1e3 / (double)(now - t0));
}

/* The calling thread, into a stream: write chunks out in order. */
static int xfer_drain(struct xfer *x, bool progress)
{
    uint64_t t0 = tfs_now_ns();
    uint64_t last = t0;
    int rc = 0;

    pthread_mutex_lock(&x->lock);
    while (x->written < x->n_chunks && rc == 0) {
        struct xfer_slot *s = &x->slots[x->written % x->n_slots];

        while (x->rc == 0 && !(s->ready && s->index == x->written))
            pthread_cond_wait(&x->cond, &x->lock);
        if (x->rc != 0)
            break;
        pthread_mutex_unlock(&x->lock);
        rc = xfer_write_all(x->fd, s->buf, s->got);
        if (progress)
            xfer_progress(x, t0, &last);
        pthread_mutex_lock(&x->lock);
        s->ready = false;
        x->written++;
        if (rc < 0) {
            x->rc = rc;
            snprintf(x->detail, sizeof(x->detail), "%s", tfs_errdetail());
        }
        pthread_cond_broadcast(&x->cond);
    }
    rc = x->rc;
    pthread_mutex_unlock(&x->lock);
    if (progress)
        fprintf(stderr, "\r%60s\r", "");
    return rc;
}

/* The calling thread, into a file: wait for the workers' chunks. */
static int xfer_wait(struct xfer *x, bool progress)
{
    uint64_t t0 = tfs_now_ns();
    uint64_t last = t0;
    int rc;

    pthread_mutex_lock(&x->lock);
    while (x->rc == 0 && x->written < x->n_chunks) {
        if (progress) {
            struct timespec ts = tfs_abstime(CLOCK_REALTIME, 500000000u);

            pthread_cond_timedwait(&x->cond, &x->lock, &ts);
            xfer_progress(x, t0, &last);
        } else {
            pthread_cond_wait(&x->cond, &x->lock);
        }
    }
    rc = x->rc;
    pthread_mutex_unlock(&x->lock);
    if (progress)
        fprintf(stderr, "\r%60s\r", "");
    if (rc == 0 && lseek(x->fd, x->base + (off_t)x->len, SEEK_SET) < 0)
        rc = tfs_err(-errno, "seek failed");
    return rc;
}

static int xfer_alloc(struct xfer *x, unsigned jobs)
{
    x->n_slots = (size_t)jobs * (x->base >= 0 ? 1 : 2);
    x->slots = tfs_calloc(x->n_slots, sizeof(*x->slots));
    if (x->slots == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < x->n_slots; i++) {
        x->slots[i].buf = tfs_malloc_faulted((size_t)x->chunk);
        if (x->slots[i].buf == NULL)
            return -ENOMEM;
    }
    return 0;
}

static void xfer_free(struct xfer *x)
{
    for (size_t i = 0; x->slots != NULL && i < x->n_slots; i++)
        tfs_free_faulted(x->slots[i].buf);
    tfs_free(x->slots);
}

int cli_xfer_read(struct tfs_store *st, const char *key,
                  const char *version, uint64_t off, uint64_t len, int fd,
                  const struct cli_xfer *opt)
{
    struct xfer x = {
        .st = st, .key = key, .version = version, .off = off, .len = len,
        .chunk = opt->chunk, .fd = fd, .dfd = -1, .base = -1,
    };
    int dfd;
    struct stat sb;
    pthread_t th[64];
    unsigned jobs = TFS_MAX(1u, TFS_MIN(opt->jobs, 64u));
    unsigned started = 0;
    int rc;

    x.n_chunks = (len + x.chunk - 1) / x.chunk;
    if (x.n_chunks == 0)
        return 0;
    jobs = (unsigned)TFS_MIN((uint64_t)jobs, x.n_chunks);
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
        !(fcntl(fd, F_GETFL) & O_APPEND))
        x.base = lseek(fd, 0, SEEK_CUR);
    dfd = x.dfd = xfer_direct_fd(&x);
    pthread_mutex_init(&x.lock, NULL);
    pthread_cond_init(&x.cond, NULL);
    rc = xfer_alloc(&x, jobs);
    for (; rc == 0 && started < jobs; started++) {
        if (pthread_create(&th[started], NULL, xfer_worker, &x) != 0)
            break;
    }
    if (started == 0 && rc == 0)
        rc = -EAGAIN;
    if (rc == 0)
        rc = x.base >= 0 ? xfer_wait(&x, opt->progress)
                         : xfer_drain(&x, opt->progress);
    pthread_mutex_lock(&x.lock);
    if (x.rc == 0 && rc < 0)
        x.rc = rc;
    pthread_cond_broadcast(&x.cond);
    pthread_mutex_unlock(&x.lock);
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    rc = x.rc;
    if (rc < 0)
        tfs_errdetail_set("%s", x.detail);
    xfer_free(&x);
    if (dfd >= 0)
        close(dfd);
    pthread_cond_destroy(&x.cond);
    pthread_mutex_destroy(&x.lock);
    return rc;
}
