/* SPDX-License-Identifier: MIT */
/*
 * The checkpoint copies a group member keeps for its peers (the "peer"
 * durability level, docs/ckpt.md; the protocol in docs/group.md): files
 * DIR/NS/STEP/NAME, each with a sidecar DIR/NS/STEP/.NAME.xxh3 holding
 * its XXH3-64 as 16 hex digits and a newline.  serve.c is the HTTP glue;
 * this file holds the rest:
 *
 *   keys       what a request may name (NS/STEP/NAME, NS/ for a list);
 *              anything else is refused before the disk is touched
 *   the tree   every directory opened with O_DIRECTORY | O_NOFOLLOW and
 *              every file with O_NOFOLLOW, relative to the copy
 *              directory's descriptor: nothing outside it is created,
 *              read or followed
 *   puts       a body streamed into .NAME.<random>.tmp and hashed as it
 *              comes; committed with fsync, the sidecar, two renames and
 *              the directories' fsyncs, or removed
 *   gets, the list, retention (the ckpt_keep newest steps of a
 *              namespace), the bytes kept (scanned once at open)
 *
 * Locking: s->lock guards the bytes kept and reserved and every change
 * to the tree's names (a directory made, a rename, retention's removals),
 * so that a get sees a file with its own sidecar and retention never
 * removes a directory a put is making.  Bodies are written and files
 * fsynced outside it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "common/bytes.h"
#include "common/util.h"
#include "group/group_int.h"
#include "tierfs/log.h"

#define GCK_LIST_MAX (64u << 20)        /* bytes of one list answer */
#define GCK_TMP_MAX (GCK_NAME_MAX + 40) /* ".NAME.xxh3.<16 hex>.tmp" */
#define GCK_SUM_LEN 17                  /* 16 hex digits and "\n" */
#define GCK_SUM_NAME_MAX (GCK_NAME_MAX + 8)     /* ".NAME.xxh3" */

struct gck {
    int             dir_fd;             /* the copy directory */
    char           *dir;                /* its path, for messages */
    uint64_t        max;                /* bytes at most */
    unsigned        keep;               /* newest steps per namespace */
    pthread_mutex_t lock;
    uint64_t        kept;               /* bytes of finished files; lock */
    uint64_t        reserved;           /* bodies on their way; lock */
    uint64_t        removed;            /* files retention removed; lock */
};

struct gck_put {
    struct gck    *s;
    struct gck_key k;
    int            ns_fd;
    int            step_fd;
    int            fd;                  /* the tmp file */
    char           tmp[GCK_TMP_MAX];    /* its name in step_fd */
    uint64_t       len;                 /* Content-Length, reserved */
    uint64_t       got;                 /* bytes written so far */
    uint64_t       want;                /* the digest the header gave */
    XXH3_state_t  *h;                   /* XXH3_createState's: 64-byte
                                           aligned, which tfs_malloc is
                                           not */
};

/* ---- keys ---- */

static bool gck_ns_ok(const char *p, size_t len)
{
    if (len != GCK_NS_LEN)
        return false;
    for (size_t i = 0; i < len; i++)
        if (tfs_hexval_lower(p[i]) < 0)
            return false;
    return true;
}

/*
 * "step-" and 6 to 20 digits, as "step-%06" PRIu64 writes them: exactly
 * 6, or more with no leading zero, so that one step has one spelling
 * (and one directory).
 */
static bool gck_step_ok(const char *p, size_t len, uint64_t *no)
{
    uint64_t v = 0;

    if (len < 5 + 6 || len > 5 + GCK_STEP_DIGITS_MAX ||
        memcmp(p, "step-", 5) != 0 || (len > 5 + 6 && p[5] == '0'))
        return false;
    for (size_t i = 5; i < len; i++) {
        unsigned d = (unsigned)(p[i] - '0');

        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *no = v;
    return true;
}

static bool gck_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

/* A finished file's name: never a tmp file's or a sidecar's. */
static bool gck_name_ok(const char *p, size_t len)
{
    if (len == 0 || len > GCK_NAME_MAX || p[0] == '.' ||
        (len >= 4 && memcmp(p + len - 4, ".tmp", 4) == 0))
        return false;
    for (size_t i = 0; i < len; i++)
        if (!gck_name_char(p[i]))
            return false;
    return true;
}

int gck_key_parse(const char *path, struct gck_key *k, bool *is_list)
{
    const char *a = strchr(path, '/');
    const char *b = a != NULL ? strchr(a + 1, '/') : NULL;

    memset(k, 0, sizeof(*k));
    if (a == NULL || !gck_ns_ok(path, (size_t)(a - path)))
        return tfs_err(-EINVAL, "bad namespace: want NS/STEP/NAME or NS/ "
                       "with NS 16 lowercase hex digits");
    memcpy(k->ns, path, GCK_NS_LEN);
    *is_list = a[1] == '\0';
    if (*is_list)
        return 0;
    if (b == NULL || !gck_step_ok(a + 1, (size_t)(b - a - 1), &k->step_no))
        return tfs_err(-EINVAL, "bad step: want step- and 6 to %d digits "
                       "(as step-%%06llu writes them)", GCK_STEP_DIGITS_MAX);
    memcpy(k->step, a + 1, (size_t)(b - a - 1));
    if (!gck_name_ok(b + 1, strlen(b + 1)))
        return tfs_err(-EINVAL, "bad name: want 1-%d bytes of A-Z a-z 0-9 "
                       "._-, not starting with '.' nor ending in .tmp",
                       GCK_NAME_MAX);
    memcpy(k->name, b + 1, strlen(b + 1));
    return 0;
}

/* ---- the tree ---- */

static int gck_openat_dir(int at, const char *name)
{
    return openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                O_CLOEXEC);
}

/* Directory name of at, made 0700 when missing: a new descriptor. */
static int gck_subdir(struct gck *s, int at, const char *name, int *out)
{
    int fd;

    if (mkdirat(at, name, 0700) < 0 && errno != EEXIST)
        return tfs_err(-errno, "checkpoint copies %s: cannot make %s: %s",
                       s->dir, name, strerror(errno));
    fd = gck_openat_dir(at, name);
    if (fd < 0)
        return tfs_err(-errno, "checkpoint copies %s: cannot open %s (a "
                       "link or a file are refused): %s", s->dir, name,
                       strerror(errno));
    *out = fd;
    return 0;
}

/* A directory to walk: name of at, or NULL (ENOENT: not there). */
static DIR *gck_opendir(int at, const char *name)
{
    int fd = gck_openat_dir(at, name);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

    if (d == NULL && fd >= 0)
        close(fd);
    return d;
}

/* The sidecar of file name: ".NAME.xxh3" into out. */
static void gck_sum_name(char out[GCK_SUM_NAME_MAX], const char *name)
{
    snprintf(out, GCK_SUM_NAME_MAX, ".%.*s.xxh3", GCK_NAME_MAX, name);
}

static bool gck_is_tmp(const char *name)
{
    size_t len = strlen(name);

    return name[0] == '.' && len > 4 && strcmp(name + len - 4, ".tmp") == 0;
}

/* The size of finished file name in dfd; false when it is not one. */
static bool gck_file_size(int dfd, const char *name, uint64_t *size)
{
    struct stat st;

    if (!gck_name_ok(name, strlen(name)) ||
        fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISREG(st.st_mode))
        return false;
    *size = (uint64_t)st.st_size;
    return true;
}

/* Open once: count what one step directory keeps; drop a crash's tmps. */
static uint64_t gck_scan_step(DIR *d)
{
    struct dirent *de;
    uint64_t sum = 0;

    while ((de = readdir(d)) != NULL) {
        uint64_t size;

        if (gck_is_tmp(de->d_name))
            (void)unlinkat(dirfd(d), de->d_name, 0);
        else if (gck_file_size(dirfd(d), de->d_name, &size))
            sum += size;
    }
    return sum;
}

static uint64_t gck_scan_ns(DIR *d)
{
    struct dirent *de;
    uint64_t sum = 0;

    while ((de = readdir(d)) != NULL) {
        uint64_t no;
        DIR *sd;

        if (!gck_step_ok(de->d_name, strlen(de->d_name), &no))
            continue;
        sd = gck_opendir(dirfd(d), de->d_name);
        if (sd == NULL)
            continue;
        sum += gck_scan_step(sd);
        closedir(sd);
    }
    return sum;
}

static uint64_t gck_scan(struct gck *s)
{
    DIR *d = gck_opendir(s->dir_fd, ".");
    struct dirent *de;
    uint64_t sum = 0;

    if (d == NULL)
        return 0;
    while ((de = readdir(d)) != NULL) {
        DIR *nd;

        if (!gck_ns_ok(de->d_name, strlen(de->d_name)))
            continue;
        nd = gck_opendir(dirfd(d), de->d_name);
        if (nd == NULL)
            continue;
        sum += gck_scan_ns(nd);
        closedir(nd);
    }
    closedir(d);
    return sum;
}

/*
 * The copy directory: made 0700 if missing (its parent must exist), and
 * refused if someone else owns it or may enter it (tfs_dir_open, which
 * makes an existing one of ours exactly 0700).
 */
static int gck_open_dir(const char *dir, int *out)
{
    char parent[4096];
    const char *slash;
    size_t len = strlen(dir);

    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (len == 0 || len >= sizeof(parent))
        return tfs_err(TFS_EOPTION, "group: bad checkpoint copy "
                       "directory '%s'", dir);
    memcpy(parent, dir, len);
    parent[len] = '\0';
    slash = strrchr(parent, '/');
    if (slash == NULL)
        return tfs_dir_open(".", parent, 0700, TFS_DIR_TIGHTEN, out);
    if (slash == parent)
        return tfs_dir_open("/", parent + 1, 0700, TFS_DIR_TIGHTEN, out);
    parent[slash - parent] = '\0';
    return tfs_dir_open(parent, slash + 1, 0700, TFS_DIR_TIGHTEN, out);
}

int gck_open(const char *dir, uint64_t max, unsigned keep, struct gck **out)
{
    struct gck *s = tfs_calloc(1, sizeof(*s));
    int rc;

    if (s == NULL)
        return -ENOMEM;
    s->dir = tfs_strdup(dir);
    if (s->dir == NULL) {
        tfs_free(s);
        return -ENOMEM;
    }
    rc = gck_open_dir(dir, &s->dir_fd);
    if (rc < 0) {
        tfs_free(s->dir);
        tfs_free(s);
        return rc;
    }
    s->max = max;
    s->keep = keep ? keep : GCK_KEEP_DEFAULT;
    pthread_mutex_init(&s->lock, NULL);
    s->kept = gck_scan(s);
    *out = s;
    return 0;
}

void gck_close(struct gck *s)
{
    if (s == NULL)
        return;
    close(s->dir_fd);
    pthread_mutex_destroy(&s->lock);
    tfs_free(s->dir);
    tfs_free(s);
}

void gck_usage(struct gck *s, uint64_t *kept, uint64_t *removed)
{
    pthread_mutex_lock(&s->lock);
    *kept = s->kept;
    *removed = s->removed;
    pthread_mutex_unlock(&s->lock);
}

/* ---- puts ---- */

/* A fresh ".BASE.<16 hex>.tmp" in dfd, 0600: its descriptor. */
static int gck_tmp_create(struct gck *s, int dfd, const char *base,
                          char *name, size_t size, int *out)
{
    for (int tries = 0; tries < 8; tries++) {
        int fd;

        snprintf(name, size, ".%s.%016" PRIx64 ".tmp", base,
                 tfs_rand_u64());
        fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
                                   O_CLOEXEC, 0600);
        if (fd >= 0) {
            *out = fd;
            return 0;
        }
        if (errno != EEXIST)
            break;
    }
    return tfs_err(-errno, "checkpoint copies %s: cannot create %s: %s",
                   s->dir, name, strerror(errno));
}

static void gck_put_free(struct gck_put *p)
{
    if (p->fd >= 0)
        close(p->fd);
    if (p->step_fd >= 0)
        close(p->step_fd);
    if (p->ns_fd >= 0)
        close(p->ns_fd);
    XXH3_freeState(p->h);
    tfs_free(p);
}

/* Give back p's reservation and its tmp file, then p.  s->lock held. */
static void gck_put_drop_locked(struct gck_put *p)
{
    p->s->reserved -= p->len;
    if (p->fd >= 0)
        (void)unlinkat(p->step_fd, p->tmp, 0);
}

/* Reserve len bytes under the quota.  s->lock held. */
static int gck_reserve(struct gck *s, uint64_t len)
{
    uint64_t used = s->kept + s->reserved;

    if (len > s->max || used > s->max - len)
        return tfs_err(-EDQUOT, "checkpoint copies: %" PRIu64 " of %" PRIu64
                       " bytes used", used, s->max);
    s->reserved += len;
    return 0;
}

/* The directories and the tmp file of p.  s->lock held. */
static int gck_put_files(struct gck_put *p)
{
    struct gck *s = p->s;
    int rc = gck_subdir(s, s->dir_fd, p->k.ns, &p->ns_fd);

    if (rc == 0)
        rc = gck_subdir(s, p->ns_fd, p->k.step, &p->step_fd);
    if (rc == 0)
        rc = gck_tmp_create(s, p->step_fd, p->k.name, p->tmp,
                            sizeof(p->tmp), &p->fd);
    return rc;
}

int gck_put_begin(struct gck *s, const struct gck_key *k, uint64_t len,
                  uint64_t digest, struct gck_put **out)
{
    struct gck_put *p = tfs_calloc(1, sizeof(*p));
    int rc;

    if (p == NULL)
        return -ENOMEM;
    p->s = s;
    p->k = *k;
    p->ns_fd = p->step_fd = p->fd = -1;
    p->len = len;
    p->want = digest;
    p->h = XXH3_createState();
    if (p->h == NULL) {
        tfs_free(p);
        return -ENOMEM;
    }
    XXH3_64bits_reset(p->h);
    pthread_mutex_lock(&s->lock);
    rc = gck_reserve(s, len);
    if (rc == 0) {
        rc = gck_put_files(p);
        if (rc < 0)
            gck_put_drop_locked(p);
    }
    pthread_mutex_unlock(&s->lock);
    if (rc < 0) {
        gck_put_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int gck_put_feed(struct gck_put *p, const void *data, size_t len)
{
    int rc;

    if (len > p->len - p->got)
        return tfs_err(-EBADMSG, "checkpoint copy %s/%s/%s: more than its "
                       "Content-Length of %" PRIu64 " bytes", p->k.ns,
                       p->k.step, p->k.name, p->len);
    rc = tfs_write_all(p->fd, data, len);
    if (rc < 0)
        return tfs_err(rc, "checkpoint copies %s: cannot write %s/%s/%s: "
                       "%s", p->s->dir, p->k.ns, p->k.step, p->tmp,
                       tfs_strerror(rc));
    XXH3_64bits_update(p->h, data, len);
    p->got += len;
    return 0;
}

void gck_put_abort(struct gck_put *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->s->lock);
    gck_put_drop_locked(p);
    pthread_mutex_unlock(&p->s->lock);
    gck_put_free(p);
}

/* The body is whole and hashes to the header's digest? */
static int gck_put_check(struct gck_put *p)
{
    uint64_t got = XXH3_64bits_digest(p->h);

    if (p->got != p->len)
        return tfs_err(-EBADMSG, "short body: %" PRIu64 " of %" PRIu64
                       " bytes", p->got, p->len);
    if (got != p->want)
        return tfs_err(-EBADMSG, "checksum mismatch: the body hashes to "
                       "%016" PRIx64 ", " GROUP_H_SUM " says %016" PRIx64,
                       got, p->want);
    return 0;
}

/* The sidecar's tmp file, written and fsynced: its name into name. */
static int gck_sum_write(struct gck_put *p, char *name, size_t size)
{
    char base[GCK_SUM_NAME_MAX];
    char text[GCK_SUM_LEN + 1];
    int rc;
    int fd;

    snprintf(base, sizeof(base), "%s.xxh3", p->k.name);
    snprintf(text, sizeof(text), "%016" PRIx64 "\n", p->want);
    rc = gck_tmp_create(p->s, p->step_fd, base, name, size, &fd);
    if (rc < 0)
        return rc;
    rc = tfs_write_all(fd, text, GCK_SUM_LEN);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    close(fd);
    if (rc < 0) {
        (void)unlinkat(p->step_fd, name, 0);
        return tfs_err(rc, "checkpoint copies %s: cannot write the "
                       "checksum of %s/%s/%s: %s", p->s->dir, p->k.ns,
                       p->k.step, p->k.name, tfs_strerror(rc));
    }
    return 0;
}

/*
 * Put p's two files in place, the sidecar first, and count the bytes (a
 * replaced file's go).  s->lock held.  A failure removes what is left of
 * p's; a sidecar renamed before a failed rename of the file is one a get
 * finds wrong for the old file, so it goes too.
 */
static int gck_put_rename_locked(struct gck_put *p, const char *sum_tmp)
{
    struct gck *s = p->s;
    char sum[GCK_SUM_NAME_MAX];
    uint64_t old = 0;
    bool had = gck_file_size(p->step_fd, p->k.name, &old);
    int rc = 0;

    gck_sum_name(sum, p->k.name);
    if (renameat(p->step_fd, sum_tmp, p->step_fd, sum) < 0) {
        rc = -errno;
        (void)unlinkat(p->step_fd, sum_tmp, 0);
    } else if (renameat(p->step_fd, p->tmp, p->step_fd, p->k.name) < 0) {
        rc = -errno;
        (void)unlinkat(p->step_fd, sum, 0);
    }
    if (rc < 0)
        return tfs_err(rc, "checkpoint copies %s: cannot rename %s/%s/%s "
                       "into place: %s", s->dir, p->k.ns, p->k.step,
                       p->k.name, strerror(-rc));
    s->kept += p->len - (had ? old : 0);
    s->reserved -= p->len;
    close(p->fd);
    p->fd = -1;                         /* nothing left to remove */
    return 0;
}

/* Make the renames durable: the step's directory and those above it,
   every time (another put may have made them and not synced them yet). */
static int gck_put_sync_dirs(struct gck_put *p)
{
    if (fsync(p->step_fd) < 0 || fsync(p->ns_fd) < 0 ||
        fsync(p->s->dir_fd) < 0)
        return tfs_err(-errno, "checkpoint copies %s: cannot fsync the "
                       "directories of %s/%s: %s", p->s->dir, p->k.ns,
                       p->k.step, strerror(errno));
    return 0;
}

static bool gck_is_manifest(const char *name)
{
    size_t len = strlen(name);

    return len > 6 && strcmp(name + len - 6, ".local") == 0;
}

static void gck_retain(struct gck *s, const char *ns);

int gck_put_end(struct gck_put *p)
{
    struct gck *s = p->s;
    char sum_tmp[GCK_TMP_MAX];
    int rc = gck_put_check(p);

    if (rc == 0 && fsync(p->fd) < 0)
        rc = tfs_err(-errno, "checkpoint copies %s: cannot fsync %s/%s/%s: "
                     "%s", s->dir, p->k.ns, p->k.step, p->tmp,
                     strerror(errno));
    if (rc == 0)
        rc = gck_sum_write(p, sum_tmp, sizeof(sum_tmp));
    pthread_mutex_lock(&s->lock);
    if (rc == 0)
        rc = gck_put_rename_locked(p, sum_tmp);
    if (rc < 0)
        gck_put_drop_locked(p);
    pthread_mutex_unlock(&s->lock);
    if (rc == 0)
        rc = gck_put_sync_dirs(p);
    if (rc == 0 && gck_is_manifest(p->k.name))
        gck_retain(s, p->k.ns);
    gck_put_free(p);
    return rc;
}

/* ---- gets ---- */

/* The digest in sidecar .NAME.xxh3 of dfd. */
static int gck_sum_read(int dfd, const char *name, uint64_t *digest)
{
    char path[GCK_SUM_NAME_MAX];
    char text[GCK_SUM_LEN + 1];
    size_t n = 0;
    uint64_t v = 0;
    int fd;
    int rc;

    gck_sum_name(path, name);
    fd = openat(dfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -ENOENT;
    rc = tfs_pread_full(fd, text, sizeof(text), 0, &n);
    close(fd);
    if (rc < 0)
        return rc;
    if (n != GCK_SUM_LEN || text[GCK_SUM_LEN - 1] != '\n')
        return -EBADMSG;
    for (size_t i = 0; i < GCK_SUM_LEN - 1; i++) {
        int d = tfs_hexval_lower(text[i]);

        if (d < 0)
            return -EBADMSG;
        v = v << 4 | (uint64_t)d;
    }
    *digest = v;
    return 0;
}

/* The file of k and its sidecar's digest, as one pair.  s->lock held. */
static int gck_get_locked(struct gck *s, const struct gck_key *k, int *out,
                          uint64_t *size, uint64_t *digest)
{
    int ns_fd = gck_openat_dir(s->dir_fd, k->ns);
    int step_fd = ns_fd >= 0 ? gck_openat_dir(ns_fd, k->step) : -1;
    int fd = step_fd >= 0 ? openat(step_fd, k->name, O_RDONLY | O_NOFOLLOW |
                                   O_CLOEXEC) : -1;
    struct stat st;
    int rc = fd < 0 ? -ENOENT : 0;

    if (rc == 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)))
        rc = -ENOENT;
    if (rc == 0)
        rc = gck_sum_read(step_fd, k->name, digest);
    if (rc == 0) {
        *size = (uint64_t)st.st_size;
        *out = fd;
    } else if (fd >= 0) {
        close(fd);
    }
    if (step_fd >= 0)
        close(step_fd);
    if (ns_fd >= 0)
        close(ns_fd);
    return rc;
}

int gck_get(struct gck *s, const struct gck_key *k, int *fd, uint64_t *size,
            uint64_t *digest)
{
    int rc;

    pthread_mutex_lock(&s->lock);
    rc = gck_get_locked(s, k, fd, size, digest);
    pthread_mutex_unlock(&s->lock);
    if (rc == -ENOENT)
        return tfs_err(rc, "no checkpoint copy %s/%s/%s here", k->ns,
                       k->step, k->name);
    if (rc < 0)
        return tfs_err(rc, "checkpoint copy %s/%s/%s: its checksum file is "
                       "damaged", k->ns, k->step, k->name);
    return 0;
}

/* ---- the list ---- */

struct gck_ent {
    uint64_t step;
    char    *line;                      /* "STEP NAME SIZE\n", owned */
};

struct gck_ents {
    struct gck_ent *v;
    size_t          n;
    size_t          cap;
};

static int gck_ents_add(struct gck_ents *e, uint64_t step, const char *s,
                        const char *name, uint64_t size)
{
    struct tfs_buf b;

    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 64;
        struct gck_ent *v = tfs_realloc(e->v, cap * sizeof(*v));

        if (v == NULL)
            return -ENOMEM;
        e->v = v;
        e->cap = cap;
    }
    tfs_buf_init(&b, 0);
    tfs_buf_printf(&b, "%s %s %" PRIu64 "\n", s, name, size);
    e->v[e->n].line = tfs_buf_steal(&b);
    if (e->v[e->n].line == NULL)
        return -ENOMEM;
    e->v[e->n++].step = step;
    return 0;
}

static void gck_ents_cleanup(struct gck_ents *e)
{
    for (size_t i = 0; i < e->n; i++)
        tfs_free(e->v[i].line);
    tfs_free(e->v);
}

/* By step number, then by name: lines of one step differ first in the
   name, and the ' ' after it sorts before every byte a name may hold. */
static int gck_ent_cmp(const void *a, const void *b)
{
    const struct gck_ent *x = a;
    const struct gck_ent *y = b;

    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return strcmp(x->line, y->line);
}

/* The finished files of one step directory, each with its sidecar. */
static int gck_list_step(DIR *d, uint64_t step, const char *s,
                         struct gck_ents *e)
{
    struct dirent *de;
    int rc = 0;

    while (rc == 0 && (de = readdir(d)) != NULL) {
        char sum[GCK_SUM_NAME_MAX];
        struct stat st;
        uint64_t size;

        if (!gck_file_size(dirfd(d), de->d_name, &size))
            continue;
        gck_sum_name(sum, de->d_name);
        if (fstatat(dirfd(d), sum, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode))
            rc = gck_ents_add(e, step, s, de->d_name, size);
    }
    return rc;
}

static int gck_list_locked(struct gck *s, const char *ns,
                           struct gck_ents *e)
{
    DIR *d = gck_opendir(s->dir_fd, ns);
    struct dirent *de;
    int rc = 0;

    if (d == NULL)                      /* none, or a link: nothing */
        return errno == ENOENT || errno == ELOOP || errno == ENOTDIR
               ? 0 : -errno;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        uint64_t no;
        DIR *sd;

        if (!gck_step_ok(de->d_name, strlen(de->d_name), &no))
            continue;
        sd = gck_opendir(dirfd(d), de->d_name);
        if (sd == NULL)
            continue;
        rc = gck_list_step(sd, no, de->d_name, e);
        closedir(sd);
    }
    closedir(d);
    return rc;
}

int gck_list(struct gck *s, const char *ns, struct tfs_buf *out)
{
    struct gck_ents e = {0};
    int rc;

    pthread_mutex_lock(&s->lock);
    rc = gck_list_locked(s, ns, &e);
    pthread_mutex_unlock(&s->lock);
    if (rc == 0 && e.n > 0)
        qsort(e.v, e.n, sizeof(*e.v), gck_ent_cmp);
    tfs_buf_init(out, GCK_LIST_MAX);
    tfs_buf_puts(out, "tierfs-ckpt-list 1\n");
    for (size_t i = 0; rc == 0 && i < e.n; i++)
        tfs_buf_puts(out, e.v[i].line);
    gck_ents_cleanup(&e);
    if (rc == 0)
        rc = tfs_buf_error(out);
    if (rc < 0) {
        tfs_buf_cleanup(out);
        return tfs_err(rc, "checkpoint copies %s: cannot list %s: %s",
                       s->dir, ns, tfs_strerror(rc));
    }
    return 0;
}

/* ---- retention ---- */

struct gck_step {
    uint64_t no;
    char     name[GCK_STEP_DIGITS_MAX + 6];
};

static int gck_step_cmp_desc(const void *a, const void *b)
{
    const struct gck_step *x = a;
    const struct gck_step *y = b;

    return x->no == y->no ? 0 : x->no > y->no ? -1 : 1;
}

/* The step directories of namespace directory d, into *out (owned). */
static int gck_steps(DIR *d, struct gck_step **out, size_t *n)
{
    struct gck_step *v = NULL;
    struct dirent *de;
    size_t cap = 0;

    *n = 0;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        uint64_t no;

        if (!gck_step_ok(de->d_name, strlen(de->d_name), &no) ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISDIR(st.st_mode))
            continue;
        if (*n == cap) {
            struct gck_step *w;

            cap = cap ? 2 * cap : 16;
            w = tfs_realloc(v, cap * sizeof(*v));
            if (w == NULL) {
                tfs_free(v);
                return -ENOMEM;
            }
            v = w;
        }
        v[*n].no = no;
        snprintf(v[*n].name, sizeof(v[*n].name), "%.*s",
                 GCK_STEP_DIGITS_MAX + 5, de->d_name);
        (*n)++;
    }
    *out = v;
    return 0;
}

/* Remove step directory name of ns_fd with every file in it; false if
   the directory stays.  s->lock held. */
static bool gck_remove_step(struct gck *s, int ns_fd, const char *name)
{
    DIR *d = gck_opendir(ns_fd, name);
    struct dirent *de;

    if (d == NULL)
        return false;
    while ((de = readdir(d)) != NULL) {
        uint64_t size;
        bool counted;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        counted = gck_file_size(dirfd(d), de->d_name, &size);
        if (unlinkat(dirfd(d), de->d_name, 0) < 0 || !counted)
            continue;
        s->kept -= TFS_MIN(size, s->kept);
        s->removed++;
    }
    closedir(d);
    return unlinkat(ns_fd, name, AT_REMOVEDIR) == 0;
}

/*
 * After a manifest (which a client sends last): keep the s->keep newest
 * steps of namespace ns, by number, and remove the older ones.  A
 * failure only leaves more kept; it is logged, the put stands.
 */
static void gck_retain(struct gck *s, const char *ns)
{
    struct gck_step *v = NULL;
    size_t n = 0;
    size_t gone = 0;
    DIR *d;

    pthread_mutex_lock(&s->lock);
    d = gck_opendir(s->dir_fd, ns);
    if (d != NULL && gck_steps(d, &v, &n) == 0 && n > s->keep) {
        qsort(v, n, sizeof(*v), gck_step_cmp_desc);
        for (size_t i = s->keep; i < n; i++)
            gone += gck_remove_step(s, dirfd(d), v[i].name);
    }
    if (d != NULL)
        closedir(d);
    pthread_mutex_unlock(&s->lock);
    tfs_free(v);
    if (n > s->keep && gone < n - s->keep)
        TFS_WARN("checkpoint copies %s: namespace %s: %zu old steps of "
                 "%zu could not be removed", s->dir, ns, n - s->keep - gone,
                 n - s->keep);
    else if (n > s->keep)
        TFS_INFO("checkpoint copies %s: namespace %s: %zu old steps "
                 "removed, the %u newest kept", s->dir, ns, gone, s->keep);
}
