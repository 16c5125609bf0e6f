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
 * Blocks live in files of their own or, small ones, as records in packs
 * (disk.c): append-only files, one open per process at a time.  A table
 * of packs in the mapping holds each pack's generation (in its file name),
 * the bytes it holds and how many entries name it.  A pack leaves whole:
 * evicted as one region (CacheLib's block cache does the same), or freed
 * when its last entry goes; its generation moves on, which makes every
 * entry still naming it stale at once, and stale entries are dropped as
 * lookups and eviction samples meet them.  Its file is unlinked after the
 * lock is let go.  A reader that opened it before still reads the bytes
 * its entry named (records are never rewritten); one that comes later
 * finds no file: a miss.
 *
 * Eviction samples random live entries (Redis's approximated LRU) and
 * evicts the least recently used of the sample (for a packed entry: its
 * pack, by the pack's latest access).  The tinylfu policy adds
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
#define IX_VERSION 3
#define IX_EMPTY 0
#define IX_LIVE 1
#define IX_PENDING 2
#define IX_SAMPLE 16
#define IX_PACK_FREE 0
#define IX_PACK_OPEN 1                  /* its owner appends to it */
#define IX_PACK_SEALED 2
#define IX_REAP_MAX 32                  /* freed packs to unlink per op */

struct ix_slot {
    uint64_t id_hi;
    uint64_t id_lo;
    uint64_t atime;                     /* logical clock of last access */
    uint32_t size;                      /* bytes of the file or record */
    uint16_t state;                     /* IX_* */
    uint16_t reserved;
    uint32_t owner;                     /* owner of a pending entry */
    uint32_t pack;                      /* 0: a file; else pack index + 1 */
    uint32_t gen;                       /* the pack's generation */
    uint32_t unit;                      /* the record's offset / 512 */
};

struct ix_pack {
    uint32_t gen;                       /* moves on when freed */
    uint32_t state;                     /* IX_PACK_* */
    uint32_t owner;                     /* the appender of an open pack */
    uint32_t live;                      /* entries naming it (+ pending) */
    uint32_t pending;                   /* of which pending */
    uint32_t reserved;
    uint64_t end;                       /* bytes given out: next record */
    uint64_t acct;                      /* its bytes in used_bytes: the
                                           records' extents, dead ones
                                           too, and the first page */
    uint64_t atime;                     /* latest access of a record */
    uint64_t salt;                      /* in its records' header sums */
};

struct ix_header {
    char            magic[8];
    uint32_t        version;
    uint32_t        slot_size;          /* sizeof(struct ix_slot) */
    uint32_t        mutex_size;         /* sizeof(pthread_mutex_t) */
    uint32_t        last_owner;         /* the last owner number given */
    uint64_t        n_slots;            /* power of two */
    uint64_t        used_bytes;         /* live + pending, packs whole */
    uint64_t        n_used;             /* live + pending + stale slots */
    uint64_t        n_stale;            /* slots naming a freed pack */
    uint64_t        clock;              /* logical access clock */
    uint64_t        sketch_ops;         /* increments since last halving */
    uint64_t        n_packs;            /* entries of the pack table */
    uint64_t        pack_next;          /* where to look for a free one */
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
    struct ix_pack   *packs;            /* mapped, h->n_packs */
    char             *pack_dir;         /* where pack files are; owned */
    uint32_t          open_pack;        /* ours: index + 1, or 0 */
    uint32_t          open_gen;
    unsigned          n_reap;           /* freed packs to unlink */
    uint32_t          reap[IX_REAP_MAX][2];     /* index, generation */
};

/* ---- layout ---- */

static size_t ix_header_size(void)
{
    return (sizeof(struct ix_header) + 4095) & ~(size_t)4095;
}

/* A pack per 4 slots: at most cache/512K packs of about 1 MiB fill it. */
static uint64_t ix_n_packs(uint64_t n_slots)
{
    return n_slots / 4;
}

static size_t ix_map_len(uint64_t n_slots)
{
    return ix_header_size() + n_slots * sizeof(struct ix_slot) +
           n_slots * TFS_TINYLFU_ROWS +
           ix_n_packs(n_slots) * sizeof(struct ix_pack);
}

static void ix_bind(struct tfs_index *ix)
{
    ix->slots = (struct ix_slot *)(void *)((char *)ix->h + ix_header_size());
    ix->freq = (struct tfs_tinylfu){
        .cells = (uint8_t *)(ix->slots + ix->h->n_slots),
        .width = ix->h->n_slots, .ops = &ix->h->sketch_ops};
    ix->packs = (struct ix_pack *)(void *)(ix->freq.cells +
                                           ix->h->n_slots * TFS_TINYLFU_ROWS);
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
 * their files orphans, removed or indexed again by the next rebuild).
 * Every pack's generation moves on, so no new pack takes an orphan's name.
 */
static void ix_lock(struct tfs_index *ix)
{
    int rc = pthread_mutex_lock(&ix->h->lock);

    if (rc == EOWNERDEAD) {
        memset(ix->slots, 0, ix->h->n_slots * sizeof(struct ix_slot));
        for (uint64_t i = 0; i < ix->h->n_packs; i++)
            ix->packs[i] = (struct ix_pack){.gen = ix->packs[i].gen + 1};
        ix->h->used_bytes = 0;
        ix->h->n_used = 0;
        ix->h->n_stale = 0;
        pthread_mutex_consistent(&ix->h->lock);
        tfs_log(TFS_LOG_WARNING, "cache index: a process died holding "
                "the lock; index cleared");
    }
}

void tfs_index_pack_path(const char *dir, uint32_t pack, uint32_t gen,
                         char *buf, size_t len)
{
    snprintf(buf, len, "%s/%08x-%08x", dir, (unsigned)(pack - 1),
             (unsigned)gen);
}

/* Unlink pack files freed under the lock, after letting it go. */
static void ix_unlock(struct tfs_index *ix)
{
    uint32_t reap[IX_REAP_MAX][2];
    unsigned n = ix->n_reap;

    memcpy(reap, ix->reap, n * sizeof(reap[0]));
    ix->n_reap = 0;
    pthread_mutex_unlock(&ix->h->lock);
    for (unsigned i = 0; i < n; i++) {
        char path[4200];

        tfs_index_pack_path(ix->pack_dir, reap[i][0] + 1, reap[i][1], path,
                            sizeof(path));
        unlink(path);
    }
}

/* ---- packs ---- */

/* The pack a slot names, or NULL: a file, or a freed pack (stale). */
static struct ix_pack *ix_pack_of(struct tfs_index *ix,
                                  const struct ix_slot *s)
{
    struct ix_pack *p;

    if (s->pack == 0 || s->pack > ix->h->n_packs)
        return NULL;
    p = &ix->packs[s->pack - 1];
    return p->gen == s->gen && p->state != IX_PACK_FREE ? p : NULL;
}

static bool ix_stale(struct tfs_index *ix, const struct ix_slot *s)
{
    return s->pack != 0 && ix_pack_of(ix, s) == NULL;
}

/*
 * Free pack p: its bytes leave the bound, every entry naming it is stale
 * from now on, and its file is unlinked once the lock is let go (at once
 * when the list is full: slower, never wrong).
 */
static void ix_pack_free(struct tfs_index *ix, struct ix_pack *p)
{
    uint32_t i = (uint32_t)(p - ix->packs);

    if (ix->pack_dir != NULL && ix->n_reap < IX_REAP_MAX) {
        ix->reap[ix->n_reap][0] = i;
        ix->reap[ix->n_reap++][1] = p->gen;
    } else if (ix->pack_dir != NULL) {
        char path[4200];

        tfs_index_pack_path(ix->pack_dir, i + 1, p->gen, path, sizeof(path));
        unlink(path);
    }
    ix->h->used_bytes -= p->acct;
    ix->h->n_stale += p->live;
    *p = (struct ix_pack){.gen = p->gen + 1};
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

/*
 * Remove slot i.  A file's bytes leave the bound; a record's stay in its
 * pack's until the pack goes, which happens when no entry names it.
 */
static void ix_delete_at(struct tfs_index *ix, uint64_t i)
{
    uint64_t mask = ix->h->n_slots - 1;
    uint64_t j = i;
    struct ix_slot *s = &ix->slots[i];
    struct ix_pack *p = ix_pack_of(ix, s);

    if (s->pack == 0)
        ix->h->used_bytes -= s->size;
    else if (p == NULL)
        ix->h->n_stale--;
    else {
        if (s->state == IX_PENDING)
            p->pending--;
        if (--p->live == 0)
            ix_pack_free(ix, p);
    }
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
           h->n_packs == ix_n_packs(h->n_slots) &&
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
    h->n_packs = ix_n_packs(n_slots);
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
    memset(ix->packs, 0, ix->h->n_packs * sizeof(struct ix_pack));
    ix->h->used_bytes = 0;
    ix->h->n_used = 0;
    ix->h->n_stale = 0;
    ix->h->pack_next = 0;
    ix->h->clock = 1;
    ix->h->sketch_ops = 0;
}

/*
 * Rebuild: a live entry for id as s says (id and state filled in here);
 * false when the table is full (the file or record stays an orphan) or
 * id is there already (a copy elsewhere came first).
 */
static bool ix_add(struct tfs_index *ix, const uint8_t *id,
                   struct ix_slot s)
{
    uint64_t i;
    bool found;

    ix_split(id, &s.id_hi, &s.id_lo);
    if (ix->h->n_used >= tfs_tinylfu_max_entries(ix->h->n_slots))
        return false;
    i = ix_find(ix, s.id_hi, s.id_lo, &found);
    if (found)
        return false;
    s.state = IX_LIVE;
    ix->slots[i] = s;
    ix->h->n_used++;
    return true;
}

void tfs_index_add(struct tfs_index *ix, const uint8_t *id, uint32_t size)
{
    if (ix_add(ix, id, (struct ix_slot){.size = size}))
        ix->h->used_bytes += size;
}

int tfs_index_add_pack(struct tfs_index *ix, uint32_t pack, uint32_t gen,
                       uint64_t end, uint64_t salt)
{
    struct ix_pack *p;

    if (pack == 0 || pack > ix->h->n_packs ||
        ix->packs[pack - 1].state != IX_PACK_FREE)
        return -EEXIST;
    p = &ix->packs[pack - 1];
    *p = (struct ix_pack){.gen = gen, .state = IX_PACK_SEALED, .end = end,
                          .acct = end, .salt = salt};
    ix->h->used_bytes += end;           /* all of it, whatever it holds */
    return 0;
}

void tfs_index_add_record(struct tfs_index *ix, const uint8_t *id,
                          uint32_t size, uint32_t pack, uint32_t unit)
{
    struct ix_pack *p = &ix->packs[pack - 1];

    if (ix_add(ix, id, (struct ix_slot){.size = size, .pack = pack,
                                        .gen = p->gen, .unit = unit}))
        p->live++;                      /* its bytes: the pack's, all */
}

bool tfs_index_pack_loaded(struct tfs_index *ix, uint32_t pack)
{
    struct ix_pack *p = &ix->packs[pack - 1];

    if (p->live > 0)
        return true;
    ix->h->used_bytes -= p->acct;
    *p = (struct ix_pack){.gen = p->gen + 1};
    return false;
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
    tfs_free(ix->pack_dir);
    tfs_free(ix);
}

int tfs_index_set_pack_dir(struct tfs_index *ix, const char *dir)
{
    ix->pack_dir = tfs_strdup(dir);
    return ix->pack_dir != NULL ? 0 : -ENOMEM;
}

/* ---- operations ---- */

/* Find id's slot; a stale one (its pack freed) is dropped on the way. */
static uint64_t ix_find_live(struct tfs_index *ix, uint64_t hi, uint64_t lo,
                             bool *found)
{
    uint64_t i = ix_find(ix, hi, lo, found);

    if (*found && ix_stale(ix, &ix->slots[i])) {
        ix_delete_at(ix, i);
        i = ix_find(ix, hi, lo, found);
    }
    return i;
}

static void ix_loc(struct tfs_index *ix, const struct ix_slot *s,
                   struct tfs_disk_loc *loc)
{
    struct ix_pack *p = ix_pack_of(ix, s);

    *loc = (struct tfs_disk_loc){.size = s->size, .pack = s->pack,
                                 .gen = s->gen, .unit = s->unit,
                                 .salt = p != NULL ? p->salt : 0};
}

bool tfs_index_lookup(struct tfs_index *ix, const uint8_t *id,
                      struct tfs_disk_loc *loc)
{
    uint64_t hi;
    uint64_t lo;
    uint64_t i;
    bool found;

    ix_split(id, &hi, &lo);
    ix_lock(ix);
    tfs_tinylfu_add(&ix->freq, lo);
    i = ix_find_live(ix, hi, lo, &found);
    found = found && ix->slots[i].state == IX_LIVE;
    if (found) {
        struct ix_pack *p = ix_pack_of(ix, &ix->slots[i]);

        ix->slots[i].atime = ++ix->h->clock;
        if (p != NULL)
            p->atime = ix->h->clock;
        ix_loc(ix, &ix->slots[i], loc);
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

/* Is owner number o dead (its byte of the lock file unlocked)? */
static bool ix_owner_dead(struct tfs_index *ix, uint32_t o)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                       .l_start = (off_t)o, .l_len = 1};

    if (o == ix->owner)
        return false;                   /* ours: our own lock hides it */
    if (fcntl(ix->lock_fd, F_OFD_GETLK, &fl) < 0)
        return false;
    return fl.l_type == F_UNLCK;
}

/* A pending entry whose owner died (its byte is unlocked) is reclaimed. */
static bool ix_is_stale(struct tfs_index *ix, const struct ix_slot *s)
{
    return s->state == IX_PENDING && ix_owner_dead(ix, s->owner);
}

/*
 * May pack p be evicted?  Not while a record is being written into it,
 * nor while a live process appends to it (its owner's open pack).
 */
static bool ix_pack_evictable(struct tfs_index *ix, const struct ix_pack *p)
{
    return p->pending == 0 &&
           (p->state == IX_PACK_SEALED || ix_owner_dead(ix, p->owner));
}

/*
 * The least recently used of a random sample of evictable entries (a
 * packed one by its pack's latest access); stale ones come first.
 */
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
        struct ix_pack *p = ix_pack_of(ix, s);
        bool stale = ix_stale(ix, s);
        uint64_t atime;

        if (s->state == IX_EMPTY)
            continue;
        if (!stale && s->state != IX_LIVE && !ix_is_stale(ix, s))
            continue;
        if (!stale && s->state == IX_LIVE && p != NULL &&
            !ix_pack_evictable(ix, p))
            continue;
        seen++;
        atime = stale || s->state == IX_PENDING ? 0
                : p != NULL ? p->atime : s->atime;
        if (atime < best_atime) {
            best_atime = atime;
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

/*
 * Evict until size fits; 0 when it does, 1 when declined, or -ENOMEM.
 * A packed victim takes its whole pack with it; stale slots just go.
 */
static int ix_make_room(struct tfs_index *ix, uint64_t lo, uint32_t size,
                        uint64_t capacity, enum tfs_evict_policy policy,
                        struct tfs_victims *v)
{
    bool checked = policy != TFS_EVICT_TINYLFU;

    while (ix_over(ix, size, capacity)) {
        struct ix_slot *s;
        struct ix_pack *p;
        uint64_t at;
        int rc;

        if (!ix_sample_victim(ix, &at))
            return 1;
        s = &ix->slots[at];
        p = ix_pack_of(ix, s);
        if (ix_stale(ix, s)) {
            ix_delete_at(ix, at);
            continue;
        }
        /* Admission: only a block clearly hotter than the first victim. */
        if (!checked && s->state == IX_LIVE &&
            !tfs_tinylfu_admits(tfs_tinylfu_count(&ix->freq, lo),
                                tfs_tinylfu_count(&ix->freq, s->id_lo)))
            return 1;
        checked = true;
        if (p != NULL && s->state == IX_LIVE) {
            v->bytes += p->acct;
            ix_pack_free(ix, p);        /* the slot is stale now */
        } else if (s->pack == 0) {
            rc = ix_victim_add(v, s);
            if (rc < 0)
                return rc;
        }
        ix_delete_at(ix, at);
    }
    return 0;
}

/* Our open pack, if it is still ours and open. */
static struct ix_pack *ix_our_pack(struct tfs_index *ix)
{
    struct ix_pack *p;

    if (ix->open_pack == 0 || ix->open_pack > ix->h->n_packs)
        return NULL;
    p = &ix->packs[ix->open_pack - 1];
    return p->gen == ix->open_gen && p->state == IX_PACK_OPEN &&
                   p->owner == ix->owner ? p : NULL;
}

/* A new open pack of ours (its header page accounted), or NULL. */
static struct ix_pack *ix_pack_alloc(struct tfs_index *ix)
{
    for (uint64_t n = 0; n < ix->h->n_packs; n++) {
        uint64_t i = (ix->h->pack_next + n) % ix->h->n_packs;
        struct ix_pack *p = &ix->packs[i];

        if (p->state != IX_PACK_FREE)
            continue;
        ix->h->pack_next = i + 1;
        *p = (struct ix_pack){.gen = p->gen, .state = IX_PACK_OPEN,
                              .owner = ix->owner, .end = TFS_INDEX_PAGE,
                              .acct = TFS_INDEX_PAGE, .atime = ix->h->clock,
                              .salt = tfs_rand_u64() | 1};
        ix->h->used_bytes += TFS_INDEX_PAGE;
        ix->open_pack = (uint32_t)i + 1;
        ix->open_gen = p->gen;
        return p;
    }
    return NULL;
}

/*
 * Room in our open pack for a record of extent bytes, after evicting for
 * size bytes (and a header page when a new pack is needed): the pack, or
 * NULL when none could be had (declined).
 */
static struct ix_pack *ix_pack_room(struct tfs_index *ix, uint32_t extent,
                                    uint64_t pack_max)
{
    struct ix_pack *p = ix_our_pack(ix);

    if (p != NULL && p->end + extent <= pack_max)
        return p;
    if (p != NULL) {
        p->state = IX_PACK_SEALED;
        if (p->live == 0)
            ix_pack_free(ix, p);
    }
    return ix_pack_alloc(ix);
}

static int ix_admit(struct tfs_index *ix, const uint8_t *id, uint32_t size,
                    uint32_t extent, uint64_t pack_max, uint64_t capacity,
                    enum tfs_evict_policy policy, struct tfs_victims *v,
                    struct tfs_disk_loc *loc)
{
    struct ix_pack *p = NULL;
    uint64_t hi;
    uint64_t lo;
    uint64_t i;
    uint32_t bytes = extent > 0 ? extent : size;    /* what it takes */
    uint32_t need = bytes;
    bool found;
    int rc;

    ix_split(id, &hi, &lo);
    ix_lock(ix);
    ix_find_live(ix, hi, lo, &found);
    if (extent > 0) {
        p = ix_our_pack(ix);
        if (p == NULL || p->end + extent > pack_max)
            need += TFS_INDEX_PAGE;
    }
    rc = found ? -EEXIST : ix_make_room(ix, lo, need, capacity, policy, v);
    if (rc == 0 && extent > 0 && (p = ix_pack_room(ix, extent, pack_max))
                                     == NULL)
        rc = 1;
    if (rc == 0) {
        i = ix_find(ix, hi, lo, &found);
        ix->slots[i] = (struct ix_slot){
            .id_hi = hi, .id_lo = lo, .size = size, .state = IX_PENDING,
            .atime = ++ix->h->clock, .owner = ix->owner};
        ix->h->used_bytes += bytes;
        ix->h->n_used++;
        if (p != NULL) {
            ix->slots[i].pack = (uint32_t)(p - ix->packs) + 1;
            ix->slots[i].gen = p->gen;
            ix->slots[i].unit = (uint32_t)(p->end / TFS_INDEX_UNIT);
            p->end += extent;
            p->acct += extent;
            p->live++;
            p->pending++;
            p->atime = ix->h->clock;
        }
        if (loc != NULL)
            ix_loc(ix, &ix->slots[i], loc);
    }
    ix_unlock(ix);
    return rc < 0 ? rc : rc == 0;
}

int tfs_index_admit(struct tfs_index *ix, const uint8_t *id, uint32_t size,
                    uint64_t capacity, enum tfs_evict_policy policy,
                    struct tfs_victims *v)
{
    if (size > capacity)
        return 0;
    return ix_admit(ix, id, size, 0, 0, capacity, policy, v, NULL);
}

int tfs_index_admit_packed(struct tfs_index *ix, const uint8_t *id,
                           uint32_t size, uint32_t extent, uint64_t pack_max,
                           uint64_t capacity, enum tfs_evict_policy policy,
                           struct tfs_victims *v, struct tfs_disk_loc *loc)
{
    if ((uint64_t)size + TFS_INDEX_PAGE > capacity ||
        extent + TFS_INDEX_PAGE > pack_max || extent % TFS_INDEX_UNIT != 0)
        return 0;
    return ix_admit(ix, id, size, extent, pack_max, capacity, policy, v,
                    loc);
}

bool tfs_index_commit(struct tfs_index *ix, const uint8_t *id, bool ok)
{
    uint64_t hi;
    uint64_t lo;
    uint64_t i;
    bool found;
    bool live = false;

    ix_split(id, &hi, &lo);
    ix_lock(ix);
    i = ix_find_live(ix, hi, lo, &found);
    if (found && ix->slots[i].state == IX_PENDING) {
        struct ix_pack *p = ix_pack_of(ix, &ix->slots[i]);

        if (ok && p != NULL)
            p->pending--;
        if (ok)
            ix->slots[i].state = IX_LIVE;
        else
            ix_delete_at(ix, i);
        live = ok;
    }
    ix_unlock(ix);
    return live;
}

void tfs_index_remove(struct tfs_index *ix, const uint8_t *id,
                      const struct tfs_disk_loc *at)
{
    uint64_t hi;
    uint64_t lo;
    uint64_t i;
    bool found;

    ix_split(id, &hi, &lo);
    ix_lock(ix);
    i = ix_find_live(ix, hi, lo, &found);
    if (found && ix->slots[i].state == IX_LIVE &&
        (at == NULL || (ix->slots[i].pack == at->pack &&
                        ix->slots[i].gen == at->gen &&
                        ix->slots[i].unit == at->unit)))
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
    i = ix_find_live(ix, hi, lo, &found);
    found = found && ix->slots[i].state == IX_LIVE;
    ix_unlock(ix);
    return found;
}

void tfs_index_usage(struct tfs_index *ix, uint64_t *bytes,
                     uint64_t *blocks)
{
    ix_lock(ix);
    *bytes = ix->h->used_bytes;
    *blocks = ix->h->n_used - ix->h->n_stale;
    ix_unlock(ix);
}
