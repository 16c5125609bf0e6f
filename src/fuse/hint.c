/* SPDX-License-Identifier: MIT */
/*
 * Order hints: the control file .tierfs-prefetch at the mount's root
 * (docs/fuse.md, "Order hints").  Each open of it is one stream; what is
 * written to it are the paths its writer's reader will open next, one a
 * line, in order (relative to the mount, or absolute under it).
 *
 * One thread a mount keeps a window ahead of the reader in every stream:
 * while a stream has fewer than window_files hinted files issued past
 * the reader and fewer than window_bytes fetched ahead for them (what
 * the cache held already does not count: it takes no RAM), it takes the next
 * hinted file and asks the cache to fetch what of it is neither in RAM
 * nor in the disk tier (tfs_cache_prefetch_misses: behind every demand
 * read in the fetch engine).  Streams take turns, a file each.
 *
 * The reader's position is told by the opens of hinted files on this
 * mount, by any process (a loader's workers open the files of one order,
 * interleaved): an open of a hinted key takes its first occurrence not
 * opened yet, and the reader is past the furthest such.  Files it got to
 * before they were issued are passed over (read on demand).  A stream
 * ends when its file is closed, or is dropped after hint_idle with
 * hinted files left and none of them opened (the reader stopped
 * following it).  Reading the file gives its stream's state as JSON.
 *
 * Lock order: fs->hints.lock, then anything the cache takes; the cache is
 * never called with the lock held.  Only the hint thread frees streams.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fuse/fuse_int.h"
#include "tierfs/log.h"

static void *fs_hint_main(void *arg);

#define HINT_MAX_PATHS (16u << 20)      /* entries a stream may hold */
#define HINT_LIST_AHEAD 1024u           /* entries whose directories are
                                           listed before they are issued */
#define HINT_LIST_PAR 16u               /* directory listings at once */
#define HINT_BUCKETS 64

struct fs_hint_entry {
    struct tfs_hstr       h;            /* key (owned, after the struct);
                                           in the map for the first
                                           occurrence only */
    struct fs_hint_entry *same;         /* the key's next occurrence */
    size_t                idx;          /* in s->e */
    uint64_t              queued;       /* bytes fetched ahead for it (its
                                           misses), once issued */
    bool                  issued;       /* its misses were queued */
    bool                  opened;
};

/* A directory a stream's files are in, and its listing (held). */
struct hint_dir {
    struct tfs_hstr  h;                 /* "a/b/" or "", after the struct */
    struct tfs_dir  *dir;               /* NULL: could not be listed */
};

/* ---- streams ---- */

static void hint_entries_free(struct fs_hstream *s)
{
    struct tfs_hmap_iter it;
    struct tfs_hnode *d;

    for (size_t i = 0; i < s->n; i++)
        tfs_free(s->e[i]);
    tfs_free(s->e);
    s->mem = 0;
    s->e = NULL;
    s->n = s->cap = 0;
    tfs_hmap_cleanup(&s->by_key);
    tfs_hmap_iter_init(&it, &s->dirs);
    while ((d = tfs_hmap_iter_next(&it)) != NULL) {
        struct hint_dir *hd = (struct hint_dir *)(void *)d;

        if (hd->dir != NULL)
            tfs_dir_put(hd->dir);
        tfs_free(hd);
    }
    tfs_hmap_cleanup(&s->dirs);
}

/* The directory part of key ("a/b/" of "a/b/c", "" of "c") into dkey
   (FS_KEY_MAX + 2 bytes); its length. */
static size_t hint_dir_key(const char *key, char *dkey)
{
    const char *slash = strrchr(key, '/');
    size_t len = slash ? (size_t)(slash - key) + 1 : 0;

    memcpy(dkey, key, len);
    dkey[len] = '\0';
    return len;
}

static struct hint_dir *hint_dir_find(struct fs_hstream *s, const char *dkey)
{
    if (s->dirs.b == NULL)
        return NULL;
    return (struct hint_dir *)(void *)tfs_hmap_find_str(&s->dirs, dkey);
}

/* s's entry for directory dkey, not listed yet; NULL without memory. */
static struct hint_dir *hint_dir_new(struct fs_hstream *s, const char *dkey)
{
    size_t len = strlen(dkey);
    struct hint_dir *d;

    if (s->dirs.b == NULL && tfs_hmap_init(&s->dirs, 16, tfs_hstr_eq) < 0)
        return NULL;
    d = tfs_calloc(1, sizeof(*d) + len + 1);
    if (d == NULL)
        return NULL;
    d->h.key = (char *)(d + 1);
    memcpy(d->h.key, dkey, len + 1);
    if (tfs_hmap_insert_str(&s->dirs, &d->h) < 0) {
        tfs_free(d);
        return NULL;
    }
    return d;
}

/* One directory's listing, on a thread of its own or the caller's. */
struct hint_listing {
    struct tfs_fs   *fs;
    struct hint_dir *d;
    pthread_t        t;
    bool             threaded;
};

static void *hint_list_main(void *arg)
{
    struct hint_listing *l = arg;

    if (tfs_cache_opendir(l->fs->cache, l->d->h.key, &l->d->dir) < 0)
        l->d->dir = NULL;               /* stat each file instead */
    return NULL;
}

/*
 * The directories of the entries ahead of s's next file (up to
 * HINT_LIST_AHEAD of them) that are not listed yet, at most
 * HINT_LIST_PAR, into dk; each entry is looked at once (s->dirs_seen).
 * The lock is held: s->e may grow meanwhile.
 */
static unsigned hint_dirs_ahead(struct fs_hstream *s,
                                char (*dk)[FS_KEY_MAX + 2])
{
    size_t end = TFS_MIN(s->n, s->issued + HINT_LIST_AHEAD);
    size_t i = TFS_MAX(s->dirs_seen, s->issued);
    unsigned k = 0;

    for (; i < end && k < HINT_LIST_PAR; i++) {
        bool dup = false;

        hint_dir_key(s->e[i]->h.key, dk[k]);
        if (hint_dir_find(s, dk[k]) != NULL)
            continue;
        for (unsigned j = 0; j < k && !dup; j++)
            dup = strcmp(dk[j], dk[k]) == 0;
        if (!dup)
            k++;
    }
    s->dirs_seen = i;
    return k;
}

/*
 * List the k directories in dk at once, a thread each (the lock not
 * held).  A hinted order of files spread over many directories met a
 * new directory every few files at its start, and each listing held the
 * thread for one store request: over a store at 20 ms a request, 50
 * directories kept the window from filling for a second of a 3 s epoch
 * (docs/performance-hints.md).
 */
static void hint_list_dirs(struct tfs_fs *fs, struct fs_hstream *s,
                           char (*dk)[FS_KEY_MAX + 2], unsigned k)
{
    struct hint_listing l[HINT_LIST_PAR];
    unsigned n = 0;

    for (unsigned i = 0; i < k; i++) {
        struct hint_dir *d = hint_dir_new(s, dk[i]);

        if (d == NULL)
            continue;
        l[n] = (struct hint_listing){.fs = fs, .d = d};
        l[n].threaded = k > 1 &&
                        pthread_create(&l[n].t, NULL, hint_list_main,
                                       &l[n]) == 0;
        if (!l[n].threaded)
            hint_list_main(&l[n]);
        n++;
    }
    for (unsigned i = 0; i < n; i++)
        if (l[i].threaded)
            pthread_join(l[i].t, NULL);
}

/*
 * The stat of hinted file key from its directory's listing: before the
 * first file of a directory is issued the directory is listed once
 * (through the cache's listing cache, which the readers' lookups use
 * too), and the stream keeps that listing, so the thread never waits on
 * a store request a file; the directories of the files ahead are listed
 * together (hint_list_dirs).  false: no listing (or no such entry), stat
 * it.  Lock not held.
 */
static bool hint_dir_stat(struct tfs_fs *fs, struct fs_hstream *s,
                          const char *key, struct tfs_stat *st)
{
    char dkey[FS_KEY_MAX + 2];
    size_t len = hint_dir_key(key, dkey);
    struct hint_dir *d = hint_dir_find(s, dkey);
    const struct tfs_dirent *de;

    if (d == NULL) {
        struct hint_listing l = {.fs = fs, .d = hint_dir_new(s, dkey)};

        if (l.d == NULL)
            return false;
        hint_list_main(&l);
        d = l.d;
    }
    de = d->dir != NULL ? tfs_dir_find(d->dir, key + len) : NULL;
    if (de == NULL || de->is_dir)
        return false;
    *st = de->st;
    return true;
}

/* What of s was issued and not opened is abandoned; then s is empty
   (it may take hints again).  hints lock held. */
static void hint_stream_end(struct fs_hints *hs, struct fs_hstream *s)
{
    for (size_t i = 0; i < s->issued && i < s->n; i++)
        if (s->e[i]->issued && !s->e[i]->opened)
            hs->c.bytes_abandoned += s->e[i]->queued;
    hint_entries_free(s);
    s->consumed = s->issued = s->dirs_seen = 0;
    s->ahead = 0;
}

int fs_hint_open(struct tfs_fs *fs, struct fs_handle *h)
{
    struct fs_hints *hs = &fs->hints;
    struct fs_hstream *s = tfs_calloc(1, sizeof(*s));
    int rc = 0;

    if (s == NULL)
        return -ENOMEM;
    s->last_ns = tfs_now_ns();
    pthread_mutex_lock(&hs->lock);
    if (!hs->started) {
        rc = pthread_create(&hs->thread, NULL, fs_hint_main, fs);
        hs->started = rc == 0;
        rc = -rc;
    }
    if (rc == 0) {
        s->next = hs->streams;
        if (hs->streams != NULL)
            hs->streams->prev = s;
        hs->streams = s;
        atomic_fetch_add(&hs->live, 1);
        hs->c.streams_opened++;
        h->hint = s;
    }
    pthread_mutex_unlock(&hs->lock);
    if (rc < 0) {
        tfs_free(s);
        return tfs_err(rc, "cannot start the order-hint thread");
    }
    return 0;
}

void fs_hint_close(struct tfs_fs *fs, struct fs_hstream *s)
{
    struct fs_hints *hs = &fs->hints;

    if (s == NULL)
        return;
    pthread_mutex_lock(&hs->lock);
    s->closed = true;                   /* the thread frees it */
    atomic_fetch_sub(&hs->live, 1);
    pthread_cond_signal(&hs->cond);
    pthread_mutex_unlock(&hs->lock);
}

/* ---- writes: the hinted paths ---- */

/*
 * The key of one hinted line (NUL-terminated, no newline) into key:
 * relative to the mount, or absolute under the mount point.  -EINVAL,
 * with a detail, for anything that could not name a file in the mount.
 */
static int hint_key(const struct tfs_fs *fs, const char *line, char *key)
{
    const char *p = line;
    size_t mlen = fs->mountpoint ? strlen(fs->mountpoint) : 0;
    size_t len;

    if (p[0] == '/') {
        if (mlen == 0 || strncmp(p, fs->mountpoint, mlen) != 0 ||
            p[mlen] != '/')
            return tfs_err(-EINVAL, "'%.200s' is not under the mount "
                           "point %s", line, fs->mountpoint);
        p += mlen + 1;
    }
    len = strlen(p);
    if (len == 0 || len > FS_KEY_MAX)
        return tfs_err(-EINVAL, "'%.200s': %s", line, len ? "too long"
                       : "the mount itself, not a file");
    for (const char *c = p; *c != '\0';) {
        const char *end = strchr(c, '/');
        size_t n = end ? (size_t)(end - c) : strlen(c);

        if (n == 0 || (n == 1 && c[0] == '.') ||
            (n == 2 && c[0] == '.' && c[1] == '.'))
            return tfs_err(-EINVAL, "'%.200s': empty, '.' or '..' "
                           "component", line);
        c += n + (end != NULL);
        if (end != NULL && *c == '\0')
            return tfs_err(-EINVAL, "'%.200s': a directory, not a file",
                           line);
    }
    memcpy(key, p, len + 1);
    return 0;
}

/* Append entry e to s; -ENOSPC past the cap, -ENOMEM.  Lock held. */
static int hint_append(struct fs_hstream *s, struct fs_hint_entry *e)
{
    struct tfs_hstr *first;

    if (s->n == HINT_MAX_PATHS)
        return -ENOSPC;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        struct fs_hint_entry **ne = tfs_realloc(s->e, cap * sizeof(*ne));

        if (ne == NULL)
            return -ENOMEM;
        s->e = ne;
        s->cap = cap;
    }
    if (s->by_key.b == NULL &&
        tfs_hmap_init(&s->by_key, HINT_BUCKETS, tfs_hstr_eq) < 0)
        return -ENOMEM;
    first = tfs_hmap_find_str(&s->by_key, e->h.key);
    if (first != NULL) {                /* a later occurrence: chained */
        struct fs_hint_entry *f = (struct fs_hint_entry *)(void *)first;

        while (f->same != NULL)
            f = f->same;
        f->same = e;
    } else if (tfs_hmap_insert_str(&s->by_key, &e->h) < 0) {
        return -ENOMEM;
    }
    e->idx = s->n;
    s->e[s->n++] = e;
    s->mem += sizeof(*e) + strlen(e->h.key) + 1 + 2 * sizeof(void *);
    return 0;
}

static struct fs_hint_entry *hint_entry_new(const char *key)
{
    size_t len = strlen(key);
    struct fs_hint_entry *e = tfs_calloc(1, sizeof(*e) + len + 1);

    if (e != NULL) {
        e->h.key = (char *)(e + 1);
        memcpy(e->h.key, key, len + 1);
    }
    return e;
}

/*
 * A write of hinted paths: whole lines are checked, and taken only when
 * every one is good (a bad line fails the write EINVAL and takes none);
 * an unfinished last line waits for the next write.
 */
static int hint_write(struct tfs_fs *fs, struct fs_hstream *s,
                      const char *buf, size_t size)
{
    struct fs_hints *hs = &fs->hints;
    char line[FS_KEY_MAX + 512];
    char key[FS_KEY_MAX + 2];
    struct fs_hint_entry **add = NULL;
    size_t n_add = 0, cap_add = 0;
    size_t plen = s->plen;
    bool nul = s->part_nul;
    int rc = 0;

    memcpy(line, s->part, TFS_MIN(plen, sizeof(s->part)));
    for (size_t i = 0; i < size && rc == 0; i++) {
        if (buf[i] != '\n') {
            if (plen < sizeof(line) - 1)
                line[plen] = buf[i];
            nul |= buf[i] == '\0';
            plen++;
            continue;
        }
        if (plen > 0 && plen < sizeof(line) && line[plen - 1] == '\r')
            plen--;
        if (plen >= sizeof(line) - 1) {
            rc = tfs_err(-EINVAL, "a hinted path of %zu bytes: too long",
                         plen);
            break;
        }
        line[plen] = '\0';
        if (nul) {
            rc = tfs_err(-EINVAL, "a hinted path with a NUL byte");
            break;
        }
        if (plen == 0)
            continue;
        plen = 0;
        nul = false;
        rc = hint_key(fs, line, key);
        if (rc < 0)
            break;
        if (n_add == cap_add) {
            size_t cap = cap_add ? 2 * cap_add : 256;
            struct fs_hint_entry **na = tfs_realloc(add, cap * sizeof(*na));

            if (na == NULL) {
                rc = -ENOMEM;
                break;
            }
            add = na;
            cap_add = cap;
        }
        add[n_add] = hint_entry_new(key);
        if (add[n_add] == NULL)
            rc = -ENOMEM;
        else
            n_add++;
    }
    if (rc == 0 && plen >= sizeof(line) - 1)
        rc = tfs_err(-EINVAL, "a hinted path of over %zu bytes: too long",
                     plen);
    pthread_mutex_lock(&hs->lock);
    if (rc < 0) {
        hs->c.bad_writes++;
    } else {
        size_t i = 0;

        s->dropped = false;             /* hints again: a fresh start */
        s->last_ns = tfs_now_ns();
        for (; i < n_add && rc == 0; i++)
            rc = hint_append(s, add[i]);
        if (rc < 0)
            i--;                        /* add[i - 1] was not taken */
        hs->c.paths += i;
        for (; i < n_add; i++)
            tfs_free(add[i]);
        n_add = 0;
        memcpy(s->part, line, TFS_MIN(plen, sizeof(s->part)));
        s->plen = plen;
        s->part_nul = nul && plen > 0;
        pthread_cond_signal(&hs->cond);
    }
    pthread_mutex_unlock(&hs->lock);
    for (size_t i = 0; i < n_add; i++)
        tfs_free(add[i]);
    tfs_free(add);
    if (rc == -ENOSPC)
        rc = tfs_err(-ENOSPC, "a hint stream holds at most %u paths",
                     HINT_MAX_PATHS);
    return rc;
}

void fs_hint_write(struct tfs_fs *fs, fuse_req_t req, struct fs_handle *h,
                   const char *buf, size_t size)
{
    int rc = hint_write(fs, h->hint, buf, size);

    if (rc < 0) {
        tfs_log(TFS_LOG_WARNING, "%s: hint refused: %s", FS_HINT_NAME,
                tfs_errdetail());
        fuse_reply_err(req, -rc);
        return;
    }
    atomic_fetch_add(&fs->n.writes, 1);
    atomic_fetch_add(&fs->n.write_bytes, size);
    fuse_reply_write(req, size);
}

/* ---- the reader's position ---- */

/* The reader is at entry idx of s (it opened it).  Lock held. */
static void hint_advance(struct fs_hints *hs, struct fs_hstream *s,
                         size_t idx)
{
    for (size_t i = s->consumed; i <= idx && i < s->issued; i++)
        if (s->e[i]->issued)
            s->ahead -= s->e[i]->queued;
    if (idx + 1 > s->consumed)
        s->consumed = idx + 1;
    /*
     * The reader got past files not issued yet.  A loader's workers open
     * the files of one order interleaved, each a batch of its own: the
     * files just behind the furthest open are still to come, and stay to
     * be issued.  Only those more than a window behind it are passed
     * over (read on demand if at all): passing all of them made the
     * first batches of an epoch, opened before the thread had issued
     * them, wait for the store a file at a time (docs/performance-
     * hints.md).
     */
    if (s->consumed > s->issued &&
        s->consumed - s->issued > hs->window_files) {
        size_t to = s->consumed - hs->window_files;

        hs->c.files_passed += to - s->issued;
        s->issued = to;
    }
}

void fs_hint_opened(struct tfs_fs *fs, const char *key)
{
    struct fs_hints *hs = &fs->hints;
    bool moved = false;

    if (atomic_load(&hs->live) == 0)
        return;
    pthread_mutex_lock(&hs->lock);
    for (struct fs_hstream *s = hs->streams; s != NULL; s = s->next) {
        struct tfs_hstr *first;
        struct fs_hint_entry *e;

        if (s->closed || s->dropped || s->n == 0)
            continue;
        first = tfs_hmap_find_str(&s->by_key, key);
        e = (struct fs_hint_entry *)(void *)first;
        while (e != NULL && e->opened)
            e = e->same;
        if (e == NULL)
            continue;
        e->opened = true;
        hs->c.opens_hinted++;
        if (e->issued)
            hs->c.bytes_used += e->queued;
        s->last_ns = tfs_now_ns();
        hint_advance(hs, s, e->idx);
        moved = true;
    }
    if (moved)
        pthread_cond_signal(&hs->cond);
    pthread_mutex_unlock(&hs->lock);
}

/* ---- the thread ---- */

/* May s issue its next file now?  Lock held. */
static bool hint_room(const struct fs_hints *hs, const struct fs_hstream *s)
{
    return !s->closed && !s->dropped && s->issued < s->n &&
           (s->issued < s->consumed ||  /* files behind the reader's */
            s->issued - s->consumed < hs->window_files) &&
           s->ahead < hs->window_bytes;
}

/* Issue s's next file: the lock is let go for the cache's calls. */
static void hint_issue(struct tfs_fs *fs, struct fs_hstream *s)
{
    struct fs_hints *hs = &fs->hints;
    struct fs_hint_entry *e = s->e[s->issued];
    uint64_t size = 0, queued = 0;
    char key[FS_KEY_MAX + 2];
    char dk[HINT_LIST_PAR][FS_KEY_MAX + 2];
    unsigned k = hint_dirs_ahead(s, dk);
    struct tfs_stat st;
    int rc;

    snprintf(key, sizeof(key), "%s", e->h.key);
    s->issued++;                        /* taken: opens may pass it */
    pthread_mutex_unlock(&hs->lock);
    if (k > 0)
        hint_list_dirs(fs, s, dk, k);
    rc = tfs_cache_prefetch_misses(fs->cache, key,
                                   hint_dir_stat(fs, s, key, &st) ? &st
                                                                  : NULL,
                                   &size, &queued);
    pthread_mutex_lock(&hs->lock);
    if (rc < 0) {
        hs->c.files_missing++;
        return;
    }
    (void)size;
    e->queued = queued;
    e->issued = true;
    hs->c.files_issued++;
    hs->c.bytes_queued += queued;
    if (queued == 0)
        hs->c.files_cached++;
    if (e->opened)                      /* opened while we were out */
        hs->c.bytes_used += queued;
    else if (e->idx >= s->consumed)
        s->ahead += queued;
}

static void *fs_hint_main(void *arg)
{
    struct tfs_fs *fs = arg;
    struct fs_hints *hs = &fs->hints;

    pthread_mutex_lock(&hs->lock);
    while (!hs->stopping) {
        uint64_t now = tfs_now_ns();
        bool worked = false;
        struct fs_hstream *next;

        for (struct fs_hstream *s = hs->streams; s != NULL; s = next) {
            next = s->next;
            if (s->closed) {
                hint_stream_end(hs, s);
                if (s->prev != NULL)
                    s->prev->next = s->next;
                else
                    hs->streams = s->next;
                if (s->next != NULL)
                    s->next->prev = s->prev;
                tfs_free(s);
                continue;
            }
            if (!s->dropped && s->consumed < s->n && now > s->last_ns &&
                now - s->last_ns > hs->idle_ms * 1000000u) {
                TFS_INFO("%s: a stream of %zu paths dropped: none of them "
                         "opened in %" PRIu64 " ms", FS_HINT_NAME, s->n,
                         hs->idle_ms);
                hint_stream_end(hs, s);
                s->dropped = true;
                hs->c.streams_dropped++;
                continue;
            }
            if (hint_room(hs, s)) {
                hint_issue(fs, s);      /* unlocks: s may be closed now */
                worked = true;
                next = s->next;         /* only this thread unlinks */
            }
        }
        if (!worked)
            tfs_cond_wait_ms(&hs->cond, &hs->lock, 1000);
    }
    pthread_mutex_unlock(&hs->lock);
    return NULL;
}

/* ---- the mount's ---- */

void fs_hints_init(struct tfs_fs *fs)
{
    struct fs_hints *hs = &fs->hints;

    pthread_mutex_init(&hs->lock, NULL);
    tfs_cond_init_mono(&hs->cond);
    hs->idle_ms = FS_HINT_IDLE_MS;
}

/* The window's bounds, from the RAM tier unless set (after the cache's
   open: a cache dir's recorded block size wins). */
void fs_hints_size(struct tfs_fs *fs)
{
    struct fs_hints *hs = &fs->hints;
    uint64_t ram = tfs_cache_mem_limit(fs->cache);

    if (hs->window_bytes == 0)
        hs->window_bytes = TFS_MIN(ram / 2, (uint64_t)FS_HINT_WINDOW_MAX);
    if (hs->window_files == 0)
        hs->window_files = FS_HINT_WINDOW_FILES;
}

void fs_hints_stop(struct tfs_fs *fs)
{
    struct fs_hints *hs = &fs->hints;

    pthread_mutex_lock(&hs->lock);
    hs->stopping = true;
    pthread_cond_signal(&hs->cond);
    pthread_mutex_unlock(&hs->lock);
    if (hs->started)
        pthread_join(hs->thread, NULL);
    hs->started = false;
}

void fs_hints_cleanup(struct fs_hints *hs)
{
    while (hs->streams != NULL) {
        struct fs_hstream *s = hs->streams;

        hs->streams = s->next;
        hint_entries_free(s);
        tfs_free(s);
    }
    pthread_cond_destroy(&hs->cond);
    pthread_mutex_destroy(&hs->lock);
}

/* ---- reading the control file: the stream's state ---- */

int fs_hint_render(struct tfs_fs *fs, const struct fs_hstream *s,
                   char *buf, size_t size)
{
    struct fs_hints *hs = &fs->hints;
    int n;

    pthread_mutex_lock(&hs->lock);
    n = snprintf(buf, size,
                 "{\"paths\":%zu,\"consumed\":%zu,\"issued\":%zu,"
                 "\"ahead_bytes\":%" PRIu64 ",\"window_files\":%u,"
                 "\"window_bytes\":%" PRIu64 ",\"dropped\":%s}\n",
                 s->n, s->consumed, s->issued, s->ahead, hs->window_files,
                 hs->window_bytes, s->dropped ? "true" : "false");
    pthread_mutex_unlock(&hs->lock);
    return n < 0 || (size_t)n >= size ? -ENOMEM : n;
}

void fs_hints_get(struct tfs_fs *fs, struct fs_hint_counters *out)
{
    struct fs_hints *hs = &fs->hints;

    pthread_mutex_lock(&hs->lock);
    *out = hs->c;
    out->streams = atomic_load(&hs->live);
    out->window_files = hs->window_files;
    out->window_bytes = hs->window_bytes;
    out->mem_bytes = 0;
    for (const struct fs_hstream *s = hs->streams; s != NULL; s = s->next)
        out->mem_bytes += s->mem;
    pthread_mutex_unlock(&hs->lock);
}
