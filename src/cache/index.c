/* SPDX-License-Identifier: MIT */
/*
 * The disk tier's index, shared by every process that opens the cache
 * dir: a file mapped MAP_SHARED holding a header, an open-addressing hash
 * table of blocks and a count-min sketch of access frequencies, guarded
 * by a robust process-shared mutex that lives in the mapping.
 *
 * The file is a shared-memory segment, not a durable format: whenever a
 * process opens it and no other process has it open (an exclusive flock
 * on a side file succeeds), the index is rebuilt from the block files, so
 * a crash can never leave it saying something the disk does not.  Native
 * struct layout is therefore fine; the header records the layout so a
 * mismatched build rebuilds instead of misreading.
 *
 * Opening: an exclusive flock on the index file itself serialises opens
 * and is held by the rebuilder until tfs_index_ready.  Under it, the
 * users' lock on the side file is tried exclusively (alone: rebuild) and
 * then held shared; so the LOCK_EX -> LOCK_SH conversion, which Linux
 * does not make atomic, can never let a newcomer find itself alone
 * beside a live index and re-initialise it.
 *
 * A pending entry names its owner: a number handed out under the mutex,
 * for which the owner holds an OFD write lock on that byte of the lock
 * file.  The kernel drops the lock when the owner dies, whatever its pid
 * namespace and however its pid is reused, so the entry is stale exactly
 * when the byte is unlocked (kill(pid, 0) answered wrongly across pid
 * namespaces and never for a reused pid).
 *
 * Eviction samples random live entries (Redis's approximated LRU) and
 * evicts the least recently used of the sample.  The tinylfu policy adds
 * an admission test when the cache is full: a new block must have been
 * asked for at least two more times than the first victim (count-min
 * sketch, halved periodically; the sketch and the rule are tinylfu.c's,
 * shared with `tierfs profile`'s simulation).  Under epoch-style scans
 * every block is asked for equally often, so the resident set stays put
 * instead of churning (as LRU does, to near-zero hits); a block that
 * becomes hotter than the resident ones still gets in.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache_int.h"
#include "cache/tinylfu.h"
#include "tierfs/log.h"

#define IX_MAGIC "TFSIDX1"
#define IX_VERSION 2
#define IX_EMPTY 0
#define IX_LIVE 1
#define IX_PENDING 2
#define IX_SAMPLE 16

struct ix_slot {
    uint64_t id_hi;
    uint64_t id_lo;
    uint64_t atime;                     /* logical clock of last access */
    uint32_t size;                      /* bytes of the block file */
    uint16_t state;                     /* IX_* */
    uint16_t reserved;
    uint32_t owner;                     /* owner of a pending entry */
    uint32_t reserved2;
};

struct ix_header {
    char            magic[8];
    uint32_t        version;
    uint32_t        slot_size;          /* sizeof(struct ix_slot) */
    uint32_t        mutex_size;         /* sizeof(pthread_mutex_t) */
    uint32_t        last_owner;         /* the last owner number given */
    uint64_t        n_slots;            /* power of two */
    uint64_t        used_bytes;         /* live + pending */
    uint64_t        n_used;             /* live + pending entries */
    uint64_t        clock;              /* logical access clock */
    uint64_t        sketch_ops;         /* increments since last halving */
    pthread_mutex_t lock;
};

struct tfs_index {
    int               fd;               /* the index file */
    int               lock_fd;          /* flock: users of the index;
                                           OFD lock: owner byte */
    uint32_t          owner;            /* ours, for pending entries */
    size_t            map_len;
    struct ix_header *h;                /* mapped */
    struct ix_slot   *slots;            /* mapped, h->n_slots */
    struct tfs_tinylfu freq;            /* over the mapped sketch: 4 rows
                                           of n_slots, h->sketch_ops */
};

/* ---- layout ---- */

static size_t ix_header_size(void)
{
    return (sizeof(struct ix_header) + 4095) & ~(size_t)4095;
}

static size_t ix_map_len(uint64_t n_slots)
{
    return ix_header_size() + n_slots * sizeof(struct ix_slot) +
           n_slots * TFS_TINYLFU_ROWS;
}

static void ix_bind(struct tfs_index *ix)
{
    ix->slots = (struct ix_slot *)(void *)((char *)ix->h + ix_header_size());
    ix->freq = (struct tfs_tinylfu){
        .cells = (uint8_t *)(ix->slots + ix->h->n_slots),
        .width = ix->h->n_slots, .ops = &ix->h->sketch_ops};
}

static void ix_split(const uint8_t *id, uint64_t *hi, uint64_t *lo)
{
    memcpy(hi, id, 8);
    memcpy(lo, id + 8, 8);
}

static void ix_join(const struct ix_slot *s, uint8_t *id)
{
    memcpy(id, &s->id_hi, 8);
    memcpy(id + 8, &s->id_lo, 8);
}

/* ---- locking ---- */

/*
 * Take the index lock.  A holder that died mid-update may have left the
 * table inconsistent; the table is then cleared (blocks become misses and
 * their files orphans, removed by the next rebuild).
 */
static void ix_lock(struct tfs_index *ix)
{
    int rc = pthread_mutex_lock(&ix->h->lock);

    if (rc == EOWNERDEAD) {
        memset(ix->slots, 0, ix->h->n_slots * sizeof(struct ix_slot));
        ix->h->used_bytes = 0;
        ix->h->n_used = 0;
        pthread_mutex_consistent(&ix->h->lock);
        tfs_log(TFS_LOG_WARNING, "cache index: a process died holding "
                "the lock; index cleared");
    }
}

static void ix_unlock(struct tfs_index *ix)
{
    pthread_mutex_unlock(&ix->h->lock);
}

/* ---- the hash table (linear probing, backward-shift deletion) ---- */

static uint64_t ix_find(struct tfs_index *ix, uint64_t hi, uint64_t lo,
                        bool *found)
{
    uint64_t mask = ix->h->n_slots - 1;
    uint64_t i = lo & mask;

    for (;;) {
        struct ix_slot *s = &ix->slots[i];
        if (s->state == IX_EMPTY) {
            *found = false;
            return i;
        }
        if (s->id_hi == hi && s->id_lo == lo) {
            *found = true;
            return i;
        }
        i = (i + 1) & mask;
    }
}

static void ix_delete_at(struct tfs_index *ix, uint64_t i)
{
    uint64_t mask = ix->h->n_slots - 1;
    uint64_t j = i;

    ix->h->used_bytes -= ix->slots[i].size;
    ix->h->n_used--;
    for (;;) {
        uint64_t home;

        j = (j + 1) & mask;
        if (ix->slots[j].state == IX_EMPTY)
            break;
        home = ix->slots[j].id_lo & mask;
        /* Move j back to i unless its home lies cyclically in (i, j]. */
        if ((j > i && (home <= i || home > j)) ||
            (j < i && (home <= i && home > j))) {
            ix->slots[i] = ix->slots[j];
            i = j;
        }
    }
    memset(&ix->slots[i], 0, sizeof(ix->slots[i]));
}

/* ---- opening ---- */

static bool ix_header_ok(const struct ix_header *h, size_t file_len)
{
    return memcmp(h->magic, IX_MAGIC, 8) == 0 && h->version == IX_VERSION &&
           h->slot_size == sizeof(struct ix_slot) &&
           h->mutex_size == sizeof(pthread_mutex_t) && h->n_slots >= 1024 &&
           (h->n_slots & (h->n_slots - 1)) == 0 &&
           ix_map_len(h->n_slots) == file_len;
}

/* Size and map the file; with a fresh layout when exclusive. */
static int ix_map(struct tfs_index *ix, uint64_t n_slots, bool exclusive)
{
    struct stat sb;
    size_t len = ix_map_len(n_slots);

    if (fstat(ix->fd, &sb) < 0)
        return -errno;
    if (!exclusive)
        len = (size_t)sb.st_size;
    else if (ftruncate(ix->fd, 0) < 0 || ftruncate(ix->fd, (off_t)len) < 0)
        return -errno;
    if (len < ix_header_size())
        return tfs_err(TFS_EFORMAT, "cache index is truncated");
    ix->h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, ix->fd, 0);
    if (ix->h == MAP_FAILED) {
        ix->h = NULL;
        return -errno;
    }
    ix->map_len = len;
    return 0;
}

static int ix_init_header(struct tfs_index *ix, uint64_t n_slots)
{
    pthread_mutexattr_t a;
    struct ix_header *h = ix->h;
    int rc;

    memcpy(h->magic, IX_MAGIC, 8);
    h->version = IX_VERSION;
    h->slot_size = sizeof(struct ix_slot);
    h->mutex_size = sizeof(pthread_mutex_t);
    h->n_slots = n_slots;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    rc = -pthread_mutex_init(&h->lock, &a);
    pthread_mutexattr_destroy(&a);
    ix_bind(ix);
    return rc;
}

/*
 * The mode of the index files: 0600, or 0660 when their directory (the
 * cache dir, docs/security.md) is shared with its group.  A file of ours
 * with another mode (0644 from an older version) is set to it.
 */
static void ix_set_mode(int fd, const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    struct stat st;
    unsigned mode = 0600;

    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1,
             slash ? path : ".");
    if (stat(dir, &st) == 0 && (st.st_mode & 070))
        mode = 0660;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
        (st.st_mode & 0777) != mode)
        (void)fchmod(fd, mode);
}

static int ix_flock(int fd, int op)
{
    int rc;

    while ((rc = flock(fd, op)) < 0 && errno == EINTR)
        ;
    return rc < 0 ? -errno : 0;
}

/* Take the next owner number and hold its byte of the lock file. */
static int ix_register_owner(struct tfs_index *ix)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 1};

    ix_lock(ix);
    if (++ix->h->last_owner == 0)
        ix->h->last_owner = 1;          /* 0: no owner */
    ix->owner = ix->h->last_owner;
    ix_unlock(ix);
    fl.l_start = (off_t)ix->owner;
    if (fcntl(ix->lock_fd, F_OFD_SETLK, &fl) < 0)
        return tfs_err(-errno, "cannot lock owner %u of the cache index",
                       ix->owner);
    return 0;
}

int tfs_index_open(const char *path, uint64_t max_blocks,
                   struct tfs_index **out, bool *exclusive)
{
    struct tfs_index *ix = tfs_calloc(1, sizeof(*ix));
    char lock_path[4096];
    int rc;

    if (ix == NULL)
        return -ENOMEM;
    snprintf(lock_path, sizeof(lock_path), "%s.lock", path);
    ix->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
                       0600);
    ix->fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    ix_set_mode(ix->lock_fd, lock_path);
    ix_set_mode(ix->fd, path);
    if (ix->lock_fd < 0 || ix->fd < 0) {
        rc = tfs_err(-errno, "cannot open the cache index %s", path);
        goto err_close;
    }
    /* One opener at a time; a rebuilder keeps this until ready. */
    rc = ix_flock(ix->fd, LOCK_EX);
    if (rc < 0)
        goto err_close;
    /* Alone (exclusive lock granted): rebuild.  Else join as a user. */
    *exclusive = flock(ix->lock_fd, LOCK_EX | LOCK_NB) == 0;
    if (!*exclusive)
        rc = ix_flock(ix->lock_fd, LOCK_SH);
    if (rc < 0)
        goto err_close;
    rc = ix_map(ix, tfs_tinylfu_width(max_blocks), *exclusive);
    if (rc == 0 && *exclusive)
        rc = ix_init_header(ix, tfs_tinylfu_width(max_blocks));
    else if (rc == 0 && !ix_header_ok(ix->h, ix->map_len))
        rc = tfs_err(TFS_EFORMAT, "cache index %s has another layout "
                     "(another tierfs version is using this cache dir)",
                     path);
    if (rc < 0)
        goto err_close;
    ix_bind(ix);
    rc = ix_register_owner(ix);
    if (rc == 0 && !*exclusive)
        rc = ix_flock(ix->fd, LOCK_UN);
    if (rc < 0)
        goto err_close;
    *out = ix;
    return 0;
err_close:
    tfs_index_close(ix);
    return rc;
}

void tfs_index_reset(struct tfs_index *ix)
{
    memset(ix->slots, 0, ix->h->n_slots * sizeof(struct ix_slot));
    memset(ix->freq.cells, 0, ix->h->n_slots * TFS_TINYLFU_ROWS);
    ix->h->used_bytes = 0;
    ix->h->n_used = 0;
    ix->h->clock = 1;
    ix->h->sketch_ops = 0;
}

void tfs_index_add(struct tfs_index *ix, const uint8_t *id, uint32_t size)
{
    uint64_t hi;
    uint64_t lo;
    uint64_t i;
    bool found;

    ix_split(id, &hi, &lo);
    if (ix->h->n_used >= tfs_tinylfu_max_entries(ix->h->n_slots))
        return;                         /* full: the file stays an orphan */
    i = ix_find(ix, hi, lo, &found);
    if (found)
        return;
    ix->slots[i] = (struct ix_slot){.id_hi = hi, .id_lo = lo,
                                    .size = size, .state = IX_LIVE};
    ix->h->used_bytes += size;
    ix->h->n_used++;
}

int tfs_index_ready(struct tfs_index *ix)
{
    int rc;

    if (msync(ix->h, ix->map_len, MS_ASYNC) < 0)
        return -errno;
    /* Not atomic, but no opener can look before the unlock below. */
    rc = ix_flock(ix->lock_fd, LOCK_SH);
    if (rc == 0)
        rc = ix_flock(ix->fd, LOCK_UN);
    return rc;
}

void tfs_index_close(struct tfs_index *ix)
{
    if (ix == NULL)
        return;
    if (ix->h != NULL)
        munmap(ix->h, ix->map_len);
    if (ix->fd >= 0)
        close(ix->fd);
    if (ix->lock_fd >= 0)
        close(ix->lock_fd);             /* drops the flock */
    tfs_free(ix);
}

/* ---- operations ---- */

bool tfs_index_lookup(struct tfs_index *ix, const uint8_t *id,
                      uint32_t *size)
{
    uint64_t hi;
    uint64_t lo;
    uint64_t i;
    bool found;

    ix_split(id, &hi, &lo);
    ix_lock(ix);
    tfs_tinylfu_add(&ix->freq, lo);
    i = ix_find(ix, hi, lo, &found);
    found = found && ix->slots[i].state == IX_LIVE;
    if (found) {
        ix->slots[i].atime = ++ix->h->clock;
        *size = ix->slots[i].size;
    }
    ix_unlock(ix);
    return found;
}

void tfs_victims_cleanup(struct tfs_victims *v)
{
    tfs_free(v->ids);
    memset(v, 0, sizeof(*v));
}

static int ix_victim_add(struct tfs_victims *v, const struct ix_slot *s)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        void *p = tfs_realloc(v->ids, cap * TFS_BLOCK_ID_LEN);
        if (p == NULL)
            return -ENOMEM;
        v->ids = p;
        v->cap = cap;
    }
    ix_join(s, v->ids[v->n++]);
    v->bytes += s->size;
    return 0;
}

/* A pending entry whose owner died (its byte is unlocked) is reclaimed. */
static bool ix_is_stale(struct tfs_index *ix, const struct ix_slot *s)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                       .l_start = (off_t)s->owner, .l_len = 1};

    if (s->state != IX_PENDING || s->owner == ix->owner)
        return false;                   /* ours: our own lock hides it */
    if (fcntl(ix->lock_fd, F_OFD_GETLK, &fl) < 0)
        return false;
    return fl.l_type == F_UNLCK;
}

/* The least recently used of a random sample of evictable entries. */
static bool ix_sample_victim(struct tfs_index *ix, uint64_t *at)
{
    uint64_t mask = ix->h->n_slots - 1;
    uint64_t best_atime = UINT64_MAX;
    unsigned seen = 0;
    bool any = false;

    for (unsigned probes = 0; seen < IX_SAMPLE && probes < 64 * IX_SAMPLE;
         probes++) {
        uint64_t i = tfs_rand_u64() & mask;
        struct ix_slot *s = &ix->slots[i];
        if (s->state != IX_LIVE && !ix_is_stale(ix, s))
            continue;
        seen++;
        if (s->state == IX_PENDING || s->atime < best_atime) {
            best_atime = s->state == IX_PENDING ? 0 : s->atime;
            *at = i;
            any = true;
        }
    }
    return any;
}

/* Must the cache make room for size more bytes (or one more entry)? */
static bool ix_over(struct tfs_index *ix, uint32_t size, uint64_t capacity)
{
    return ix->h->used_bytes + size > capacity ||
           ix->h->n_used + 1 > tfs_tinylfu_max_entries(ix->h->n_slots);
}

/* Evict until size fits; 0 when it does, 1 when declined, or -ENOMEM. */
static int ix_make_room(struct tfs_index *ix, uint64_t lo, uint32_t size,
                        uint64_t capacity, enum tfs_evict_policy policy,
                        struct tfs_victims *v)
{
    bool checked = policy != TFS_EVICT_TINYLFU;

    while (ix_over(ix, size, capacity)) {
        uint64_t at;
        int rc;

        if (!ix_sample_victim(ix, &at))
            return 1;
        /* Admission: only a block clearly hotter than the first victim. */
        if (!checked && ix->slots[at].state == IX_LIVE &&
            !tfs_tinylfu_admits(tfs_tinylfu_count(&ix->freq, lo),
                                tfs_tinylfu_count(&ix->freq,
                                                  ix->slots[at].id_lo)))
            return 1;
        checked = true;
        rc = ix_victim_add(v, &ix->slots[at]);
        if (rc < 0)
            return rc;
        ix_delete_at(ix, at);
    }
    return 0;
}

int tfs_index_admit(struct tfs_index *ix, const uint8_t *id, uint32_t size,
                    uint64_t capacity, enum tfs_evict_policy policy,
                    struct tfs_victims *v)
{
    uint64_t hi;
    uint64_t lo;
    uint64_t i;
    bool found;
    int rc;

    if (size > capacity)
        return 0;
    ix_split(id, &hi, &lo);
    ix_lock(ix);
    ix_find(ix, hi, lo, &found);
    rc = found ? -EEXIST : ix_make_room(ix, lo, size, capacity, policy, v);
    if (rc == 0) {
        i = ix_find(ix, hi, lo, &found);
        ix->slots[i] = (struct ix_slot){
            .id_hi = hi, .id_lo = lo, .size = size, .state = IX_PENDING,
            .atime = ++ix->h->clock, .owner = ix->owner};
        ix->h->used_bytes += size;
        ix->h->n_used++;
    }
    ix_unlock(ix);
    return rc < 0 ? rc : rc == 0;
}

void tfs_index_commit(struct tfs_index *ix, const uint8_t *id, bool ok)
{
    uint64_t hi;
    uint64_t lo;
    uint64_t i;
    bool found;

    ix_split(id, &hi, &lo);
    ix_lock(ix);
    i = ix_find(ix, hi, lo, &found);
    if (found && ix->slots[i].state == IX_PENDING) {
        if (ok)
            ix->slots[i].state = IX_LIVE;
        else
            ix_delete_at(ix, i);
    }
    ix_unlock(ix);
}

void tfs_index_remove(struct tfs_index *ix, const uint8_t *id)
{
    uint64_t hi;
    uint64_t lo;
    uint64_t i;
    bool found;

    ix_split(id, &hi, &lo);
    ix_lock(ix);
    i = ix_find(ix, hi, lo, &found);
    if (found && ix->slots[i].state == IX_LIVE)
        ix_delete_at(ix, i);
    ix_unlock(ix);
}

bool tfs_index_contains(struct tfs_index *ix, const uint8_t *id)
{
    uint64_t hi;
    uint64_t lo;
    uint64_t i;
    bool found;

    ix_split(id, &hi, &lo);
    ix_lock(ix);
    i = ix_find(ix, hi, lo, &found);
    found = found && ix->slots[i].state == IX_LIVE;
    ix_unlock(ix);
    return found;
}

void tfs_index_usage(struct tfs_index *ix, uint64_t *bytes,
                     uint64_t *blocks)
{
    ix_lock(ix);
    *bytes = ix->h->used_bytes;
    *blocks = ix->h->n_used;
    ix_unlock(ix);
}
