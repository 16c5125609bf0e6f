/* SPDX-License-Identifier: MIT */
/*
 * Internal helpers shared by every module (not installed):
 *
 *   error detail      tfs_err(), tfs_errdetail_set()          err.c
 *   growable buffers  struct tfs_buf, capped                  buf.c
 *   clocks, sleeps and the per-thread request deadline         clock.c
 *   random numbers, percent-encoding, number parsing          util.c
 *   URIs, option bags and option tables                       opts.c
 */
#ifndef TFS_COMMON_UTIL_H
#define TFS_COMMON_UTIL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "tierfs/api.h"
#include "tierfs/err.h"
#include "tierfs/mem.h"

#define TFS_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define TFS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TFS_MAX(a, b) ((a) > (b) ? (a) : (b))
#define tfs_container_of(ptr, type, member)                                \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/*
 * A large buffer with its pages already faulted in, by madvise calls
 * (mem.c), huge pages from 2 MiB up: on a virtual machine each page
 * fault is a trip through the hypervisor, and faulting a multi-MiB buffer
 * page by page costs more than filling it.  Free with tfs_free_faulted.
 */
void *tfs_malloc_faulted(size_t size);
void tfs_free_faulted(void *p);

/* ---- error detail (err.c) ---- */

/* Set the calling thread's error detail; returns rc, for "return tfs_err". */
int tfs_err(int rc, const char *fmt, ...) TFS_PRINTF(2, 3);
void tfs_errdetail_set(const char *fmt, ...) TFS_PRINTF(1, 2);
void tfs_errdetail_clear(void);

/*
 * A failure's cause for a message: TFS_CAUSE_FMT with TFS_CAUSE_ARGS(rc,
 * detail) prints "Connection refused (GET /b/k: ...)", or just the
 * strerror when detail is NULL or empty.
 */
#define TFS_CAUSE_FMT "%s%s%s%s"
#define TFS_CAUSE_ARGS(rc, detail)                                         \
    tfs_strerror(rc), tfs_cause_open(detail), tfs_cause_text(detail),      \
        tfs_cause_close(detail)

static inline const char *tfs_cause_open(const char *d)
{
    return d != NULL && d[0] != '\0' ? " (" : "";
}

static inline const char *tfs_cause_text(const char *d)
{
    return d != NULL ? d : "";
}

static inline const char *tfs_cause_close(const char *d)
{
    return d != NULL && d[0] != '\0' ? ")" : "";
}

/* ---- growable buffer with a cap (buf.c) ---- */

struct tfs_buf {
    char  *p;                           /* NUL-terminated when len > 0 */
    size_t len;                         /* bytes used */
    size_t cap;                         /* bytes allocated */
    size_t max;                         /* growth limit; 0 = none */
    int    err;                         /* first failed append; sticky */
};

void tfs_buf_init(struct tfs_buf *b, size_t max);
void tfs_buf_cleanup(struct tfs_buf *b);
/* Empty b and clear its error. */
void tfs_buf_reset(struct tfs_buf *b);
/*
 * -ENOMEM, or TFS_ETOOBIG when len would pass b->max.  The first failure
 * sticks: every later append (puts, printf) changes nothing and returns
 * it, until tfs_buf_reset or tfs_buf_cleanup.
 */
int tfs_buf_append(struct tfs_buf *b, const void *data, size_t len);
/* Room for extra more bytes, so appends up to that cannot fail: for a
   caller that must not fail once it has started changing things.  Errors
   as tfs_buf_append's (and they stick). */
int tfs_buf_reserve(struct tfs_buf *b, size_t extra);
int tfs_buf_puts(struct tfs_buf *b, const char *s);
int tfs_buf_printf(struct tfs_buf *b, const char *fmt, ...) TFS_PRINTF(2, 3);
/* The first failed append since init/reset (0: none); check it once,
   where the contents are finished, before using them. */
int tfs_buf_error(const struct tfs_buf *b);
/* The contents ("" when empty); valid until the next change. */
const char *tfs_buf_str(const struct tfs_buf *b);
/* Hand the contents to the caller (free with tfs_free); b is reset.  NULL
   when an append failed (read tfs_buf_error first for which error) or
   when an empty buffer's "" cannot be allocated. */
char *tfs_buf_steal(struct tfs_buf *b);

/* ---- clocks and deadlines (clock.c) ---- */

uint64_t tfs_now_ns(void);              /* CLOCK_MONOTONIC */
int64_t tfs_wall_ns(void);              /* CLOCK_REALTIME */
void tfs_sleep_ns(uint64_t ns);         /* whole duration, EINTR retried */
/* The time ns from now on clock clk, for pthread_cond_timedwait. */
struct timespec tfs_abstime(clockid_t clk, uint64_t ns);
/*
 * pthread_cond_timedwait for up to ms on the monotonic clock: for a
 * condition made with pthread_condattr_setclock(CLOCK_MONOTONIC).
 */
void tfs_cond_wait_ms(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ms);
/* A condition that waits on CLOCK_MONOTONIC: 0 or -errno. */
int tfs_cond_init_mono(pthread_cond_t *c);

/*
 * The calling thread's deadline for store requests, in tfs_now_ns()
 * time; 0 means none.  The retry layer sets it around each attempt; the
 * S3 client turns it into a curl timeout and the fault layer cuts its
 * injected stalls at it.  set returns the previous value, to restore.
 */
uint64_t tfs_deadline_get(void);
uint64_t tfs_deadline_set(uint64_t abs_ns);
/*
 * Milliseconds left before the deadline, at least 1 while it has not
 * passed, 0 once it has, or dflt_ms when there is none (never more than
 * dflt_ms when dflt_ms > 0).
 */
uint64_t tfs_deadline_left_ms(uint64_t dflt_ms);

/*
 * What the calling thread does once its request is out, before it waits
 * for the store: a fetch tells the open waiting for it that its GET is
 * on its way, and faults a buffer for the next small block (fetch.c).
 * Stores call tfs_waiting() right before they block (a socket's poll,
 * curl's transfer, a file's read, and every tfs_sleep_ns); it runs the
 * hook once and clears it.  set returns the previous hook, to restore.
 */
struct tfs_hook {
    void (*fn)(void *arg);
    void  *arg;
};
struct tfs_hook tfs_waiting_set(struct tfs_hook h);
void tfs_waiting(void);

/* ---- small utilities (util.c) ---- */

/*
 * pwrite all of buf at off, retrying EINTR and short writes (at most
 * 1 GiB a call).  0, -errno, or -EIO if a write makes no progress.
 */
int tfs_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);
/* The same at the file's position (pipes, streams): 0 or -errno. */
int tfs_write_all(int fd, const void *buf, size_t len);

/*
 * pread until len bytes or the end of the file, retrying EINTR and short
 * reads; *nread (< len only at the end of the file) or -errno.
 */
int tfs_pread_full(int fd, void *buf, size_t len, uint64_t off,
                   size_t *nread);

/* A fast per-thread PRNG (xoshiro256**), seeded from the clock and tid. */
uint64_t tfs_rand_u64(void);
double tfs_rand_double(void);           /* in [0, 1) */

/*
 * RFC 3986 percent-encoding: every byte but A-Z a-z 0-9 - _ . ~ (and '/'
 * when keep_slash) becomes %XX (uppercase hex).
 */
int tfs_pct_encode(struct tfs_buf *b, const char *s, size_t len,
                   bool keep_slash);
/* Decode %XX in place ('+' is left as is).  TFS_EURI on a bad escape. */
int tfs_pct_decode(char *s);

/* Whole-string parsers; TFS_EOPTION on anything malformed or out of range. */
int tfs_parse_u64(const char *s, uint64_t *out);
int tfs_parse_size(const char *s, uint64_t *out);
int tfs_parse_double(const char *s, double *out);
int tfs_parse_bool(const char *s, bool *out);
/* "12.3 MiB" style; returns buf. */
const char *tfs_fmt_bytes(char *buf, size_t len, double bytes);

/*
 * Raise the soft RLIMIT_NOFILE to the hard limit (limits.c), for the
 * mount daemon at start: *soft (may be NULL) receives the new value.
 * -errno.  Not for library code inside an application.
 */
int tfs_nofile_raise(uint64_t *soft);

/* ---- private directories (dir.c) ---- */

/*
 * An existing leaf of ours is chmodded to exactly mode, not refused
 * (but a setgid, group-shared one is never made private).
 */
#define TFS_DIR_TIGHTEN 1u

/*
 * Open directory root/sub for the caller's own use, creating missing
 * components with exactly mode (0700; 0770 for a group-shared cache),
 * and return a new O_DIRECTORY descriptor in *out_fd.  root is trusted
 * as named (symlinks followed) but must be owned by the euid or by root,
 * and sticky if others may write in it (/var/tmp).  Every component of
 * sub is opened with openat(O_NOFOLLOW) from the one above and fstat'ed:
 * it must be a directory, not a symlink, owned by the euid (a group-mode
 * leaf: or by a member of one of our groups, giving others nothing),
 * with no group/other write bits outside mode; the leaf gives nothing
 * beyond mode.  A refusal is -EPERM/-ELOOP/-ENOTDIR with a one-line
 * detail naming the path and the cause.
 */
int tfs_dir_open(const char *root, const char *sub, unsigned mode,
                 unsigned flags, int *out_fd);
/* The same below an open, already trusted root_fd (named root_name). */
int tfs_dir_openat(int root_fd, const char *root_name, const char *sub,
                   unsigned mode, unsigned flags, int *out_fd);
/*
 * A path the user chose: the root is its deepest existing ancestor above
 * the leaf (the current directory for a relative path with none).
 */
int tfs_dir_open_path(const char *path, unsigned mode, unsigned flags,
                      int *out_fd);

/* ---- URIs and options (opts.c) ---- */

#define TFS_URI_MAX_LAYERS 8

struct tfs_uri {
    char  *schemes[TFS_URI_MAX_LAYERS]; /* outermost first, owned */
    int    n_schemes;
    char  *location;                    /* decoded, without scheme/query */
    char  *query;                       /* raw query without '?', or NULL */
};

/*
 * Split "a+b+s3://loc?query" (or a plain path, scheme "file").  Schemes
 * are lowercased letters, digits and '-'.  Errors: TFS_EURI, -ENOMEM.
 */
int tfs_uri_parse(const char *s, struct tfs_uri *out);
void tfs_uri_cleanup(struct tfs_uri *u);

struct tfs_opt {
    char *name;                         /* owned */
    char *value;                        /* owned; "" for a bare name */
    bool  used;                         /* taken by some layer */
};

struct tfs_opts {
    struct tfs_opt *v;                  /* owned array */
    size_t          n;
};

/*
 * Add the pairs of "k=v&k2=v2" (percent-decoded).  A later value for the
 * same name replaces an earlier one.  Errors: TFS_EOPTION, -ENOMEM.
 */
int tfs_opts_parse(struct tfs_opts *o, const char *query);
void tfs_opts_cleanup(struct tfs_opts *o);
/* The value of name, marking it used, or NULL. */
const char *tfs_opts_take(struct tfs_opts *o, const char *name);
/* The first option no layer took, or NULL. */
const char *tfs_opts_unused(const struct tfs_opts *o);

/*
 * Option tables: how every name/value setter of the public API
 * (tfs_cache_set, tfs_fs_set, tfs_pack_set, tfs_pack_iter_set,
 * tfs_ckpt_writer_set, tfs_ckpt_reader_set) and the retry layer's URI
 * options parse, check
 * and store a value.  One entry per option; kind says how the text is
 * parsed and what type the field at offset (from the object's base
 * pointer) has; min and max bound the value as written (inclusive; a
 * string's length for TFS_OPT_STR), TFS_OPT_NOMAX for none.
 */
enum tfs_opt_kind {
    TFS_OPT_BOOL,       /* bool: 1/0, true/false, yes/no, on/off */
    TFS_OPT_UINT,       /* unsigned: a whole number */
    TFS_OPT_U64,        /* uint64_t: a whole number */
    TFS_OPT_SIZE,       /* uint64_t bytes: "8M", "1.5GiB" (tfs_parse_size) */
    TFS_OPT_MS,         /* uint64_t ms: whole milliseconds */
    TFS_OPT_MS_NS,      /* uint64_t ns: whole milliseconds */
    TFS_OPT_SEC_NS,     /* uint64_t ns: seconds, fractions allowed */
    TFS_OPT_SEC_MS,     /* uint64_t ms: seconds, fractions allowed */
    TFS_OPT_DOUBLE,     /* double */
    TFS_OPT_STR,        /* char *, owned: replaced by a copy */
    TFS_OPT_CUSTOM,     /* only the set callback; expect says what it takes */
};

#define TFS_OPT_NOMAX 0x1p64            /* max: no bound */

struct tfs_opt_spec;

/*
 * An option that needs more than its kind (a flag to raise, a spelling
 * to map, a document to check): called instead of the kind's store.  It
 * may call tfs_opt_store for the kind's part.  TFS_EOPTION (no detail
 * needed) for a bad value; other errors pass through with their detail.
 */
typedef int tfs_opt_set_fn(const struct tfs_opt_spec *o, void *base,
                           const char *value);

struct tfs_opt_spec {
    const char        *name;
    enum tfs_opt_kind  kind;
    size_t             offset;          /* of the field, from base */
    double             min;             /* inclusive, in the unit written */
    double             max;             /* inclusive; TFS_OPT_NOMAX */
    tfs_opt_set_fn    *set;             /* NULL: store by kind */
    const char        *expect;          /* for the detail; NULL: from kind,
                                           min and max */
};

/*
 * Set option name of the object at base to value through table t (n
 * entries).  A bad value is TFS_EOPTION with a one-line detail naming
 * what ("cache"), the option, the value and what it must be ("cache
 * option block_size=1K: expected a size in 64K..64M"); an unknown name
 * is TFS_EOPTION ("unknown cache option 'x'").  -ENOMEM.  Nothing is
 * changed on failure.
 */
int tfs_opt_apply(const char *what, const struct tfs_opt_spec *t, size_t n,
                  void *base, const char *name, const char *value);
/*
 * Parse value by o's kind, check it against o's range and store it in
 * base's field: TFS_EOPTION without a detail (tfs_opt_apply writes it),
 * -ENOMEM.  For set callbacks.
 */
int tfs_opt_store(const struct tfs_opt_spec *o, void *base,
                  const char *value);

#endif /* TFS_COMMON_UTIL_H */
