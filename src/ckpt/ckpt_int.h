/* SPDX-License-Identifier: MIT */
/*
 * Internals of the checkpoint engine (not installed), one section per
 * file of src/ckpt/:
 *
 *   safetensors.c  dtypes; safetensors header encode and decode
 *   index.c        the per-rank marker and model.safetensors.index.json
 *   box.c          copying boxes (hyper-rectangles) between tensors
 *   commit.c       the store layout, the commit protocol, retention
 *   writer.c       tfs_ckpt_writer_* (layout, background upload, commit)
 *   stage.c        the writer's local staging files
 *   reader.c       tfs_ckpt_reader_* (open, verified reads, resharding)
 *   stream.c       the reader's background streaming and verification
 */
#ifndef TFS_CKPT_INT_H
#define TFS_CKPT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <pthread.h>
#include <stdatomic.h>

#include "common/json.h"
#include "common/pool.h"
#include "common/util.h"
#include "tierfs/ckpt.h"
#include "tierfs/store.h"

/*
 * Prefix the calling thread's error detail: "what: detail" (or "what:
 * mid: detail"); returns rc.
 */
static inline int tfs_ckpt_err_in(int rc, const char *what, const char *mid)
{
    char d[512];

    snprintf(d, sizeof(d), "%s", tfs_errdetail());
    if (mid != NULL)
        return tfs_err(rc, "%s: %s: %s", what, mid, d);
    return tfs_err(rc, "%s: %s", what, d);
}

/* ---- safetensors.c --------------------------------------------------- */

#define TFS_CKPT_ST_MAX_HEADER 100000000u  /* bytes, as the reference */
#define TFS_CKPT_CSUM_KEY "TIERFS_CHECKSUMS"
#define TFS_CKPT_SHARDING_KEY "DCP_SHARDING_INFO"

/* The safetensors dtype called name (len bytes), or -1. */
int tfs_ckpt_dtype_find(const char *name, size_t len);
const char *tfs_ckpt_dtype_name(int dtype);
unsigned tfs_ckpt_dtype_bits(int dtype);
/*
 * Elements and bytes of a tensor: -EINVAL for a negative dimension, an
 * overflow, or a sub-byte dtype not ending on a byte boundary.
 */
int tfs_ckpt_tensor_size(int dtype, int ndim, const int64_t *shape,
                         uint64_t *nelem, uint64_t *nbytes);

/* One tensor of a decoded header. */
struct tfs_ckpt_st_tensor {
    const char *name;                   /* in the header's document */
    int         dtype;
    int         ndim;
    int64_t     shape[TFS_CKPT_MAX_DIMS];
    uint64_t    begin;                  /* in the data buffer */
    uint64_t    end;                    /* one past */
    bool        sliced;                 /* has DCP saved_offsets */
    int64_t     offsets[TFS_CKPT_MAX_DIMS];
    bool        has_xxh3;
    uint64_t    xxh3;                   /* of bytes [begin, end) */
};

struct tfs_ckpt_st_header {
    struct tfs_json_doc   doc;
    uint64_t                   header_len; /* N: JSON bytes */
    uint64_t                   data_len;   /* bytes after 8 + N */
    struct tfs_ckpt_st_tensor *v;          /* by begin offset, owned */
    size_t                     n;
    const char                *format;     /* __metadata__ "format" */
};

/*
 * Check the 8-byte length prefix b of a file of file_size bytes and set
 * *n: TFS_EFORMAT ("what: header length N beyond the file of S bytes").
 */
int tfs_ckpt_st_header_len(const unsigned char b[8], uint64_t file_size,
                           const char *what, uint64_t *n);
/*
 * Decode and validate the n bytes of header JSON of a file of file_size
 * bytes: every tensor's dtype, shape and offsets, no holes, overlaps or
 * trailing bytes, string-only metadata, our checksums and DCP sharding
 * info.  TFS_EFORMAT with the detail "what: cause"; -ENOMEM.
 */
int tfs_ckpt_st_decode(const char *json, size_t n, uint64_t file_size,
                       const char *what, struct tfs_ckpt_st_header *out);
void tfs_ckpt_st_cleanup(struct tfs_ckpt_st_header *h);

/* One tensor to encode, with its place in the data buffer. */
struct tfs_ckpt_st_entry {
    const char    *name;
    int            dtype;
    int            ndim;
    const int64_t *shape;
    const int64_t *offsets;             /* NULL: a whole tensor */
    uint64_t       begin;
    uint64_t       end;
    uint64_t       xxh3;
};

/*
 * Append a whole header (8-byte length, then JSON padded with spaces to a
 * multiple of 8) for v[0..n) to out.  Its length depends only on names,
 * dtypes, shapes and offsets, never on the checksums, so a header can be
 * sized before the data is hashed.
 */
int tfs_ckpt_st_encode(struct tfs_buf *out,
                       const struct tfs_ckpt_st_entry *v, size_t n);

/* ---- index.c --------------------------------------------------------- */

#define TFS_CKPT_INDEX_NAME "model.safetensors.index.json"
#define TFS_CKPT_JSON_MAX (64u << 20)   /* bytes of an index or marker */

struct tfs_ckpt_file_info {
    char    *name;                      /* "model-rank00000-00001..." */
    unsigned rank;
    uint64_t size;                      /* bytes of the file */
    uint64_t header_size;               /* 8 + N */
    uint64_t header_xxh3;               /* of bytes [0, header_size) */
    uint64_t data_xxh3;                 /* of bytes [header_size, size) */
    size_t   n_tensors;
};

/* One saved tensor (or slice), as a marker records it. */
struct tfs_ckpt_tensor_info {
    char    *name;
    char    *file;
    int      dtype;
    int      ndim;
    int64_t  shape[TFS_CKPT_MAX_DIMS];  /* of what was saved */
    bool     sliced;
    int64_t  offsets[TFS_CKPT_MAX_DIMS];
    int64_t  full_shape[TFS_CKPT_MAX_DIMS];
    uint64_t nbytes;
};

/* The save attempt a marker joined: 16 hex digits, or "" (none). */
#define TFS_CKPT_ATTEMPT_LEN 20
#define TFS_CKPT_ATTEMPT_NAME "attempt"

struct tfs_ckpt_marker {
    unsigned                     rank;
    unsigned                     world_size;
    uint64_t                     step;
    char                        *run_id;
    struct tfs_ckpt_file_info   *files;
    size_t                       n_files;
    struct tfs_ckpt_tensor_info *tensors;
    size_t                       n_tensors;
    char                        *extra;  /* JSON text, or NULL */
    char                         attempt[TFS_CKPT_ATTEMPT_LEN];
};

/* A tensor that several ranks saved slices of. */
struct tfs_ckpt_sharded {
    char    *name;
    int      dtype;
    int      ndim;
    int64_t  shape[TFS_CKPT_MAX_DIMS];  /* of the full tensor */
};

struct tfs_ckpt_index {
    uint64_t                   step;
    unsigned                   world_size;
    uint64_t                   total_size;  /* bytes of tensor data */
    char                      *run_id;
    int64_t                    created_ns;
    struct tfs_ckpt_file_info *files;
    size_t                     n_files;
    char                     **wm_names;    /* weight_map, in order */
    char                     **wm_files;
    size_t                     n_wm;
    struct tfs_ckpt_sharded   *sharded;
    size_t                     n_sharded;
    char                     **extra;       /* world_size JSON texts */
};

int tfs_ckpt_marker_write(struct tfs_buf *b, const struct tfs_ckpt_marker *m);
/* TFS_EFORMAT with "what: cause"; -ENOMEM. */
int tfs_ckpt_marker_parse(const char *text, size_t len, const char *what,
                          struct tfs_ckpt_marker *out);
void tfs_ckpt_marker_cleanup(struct tfs_ckpt_marker *m);

/*
 * Merge the markers of ranks 0..n-1 (m[r].rank == r) into an index:
 * checks that they agree (step, world size, dtypes, full shapes) and
 * that the slices of every tensor tile it without partial overlaps.
 * TFS_EFORMAT naming the tensor; -ENOMEM.
 */
int tfs_ckpt_index_build(const struct tfs_ckpt_marker *m, size_t n,
                         int64_t created_ns, struct tfs_ckpt_index *out);
int tfs_ckpt_index_write(struct tfs_buf *b, const struct tfs_ckpt_index *ix);
int tfs_ckpt_index_parse(const char *text, size_t len, const char *what,
                         struct tfs_ckpt_index *out);
void tfs_ckpt_index_cleanup(struct tfs_ckpt_index *ix);
/* The file called name in ix, or NULL. */
const struct tfs_ckpt_file_info *
tfs_ckpt_index_file(const struct tfs_ckpt_index *ix, const char *name);

/* ---- box.c ----------------------------------------------------------- */

/* A box of a tensor: where it starts and how big it is, per dimension. */
struct tfs_ckpt_box {
    int     ndim;
    int64_t off[TFS_CKPT_MAX_DIMS];
    int64_t len[TFS_CKPT_MAX_DIMS];
};

uint64_t tfs_ckpt_box_volume(const struct tfs_ckpt_box *b);
/* The intersection of a and b in *out; false when it is empty. */
bool tfs_ckpt_box_intersect(const struct tfs_ckpt_box *a,
                            const struct tfs_ckpt_box *b,
                            struct tfs_ckpt_box *out);
/*
 * Copy the elements of box part (inside both boxes) from src, laid out
 * C-order as box src_box, to dst, laid out as box dst_box.  elem: bytes
 * per element.
 */
void tfs_ckpt_box_copy(void *dst, const struct tfs_ckpt_box *dst_box,
                       const void *src, const struct tfs_ckpt_box *src_box,
                       const struct tfs_ckpt_box *part, size_t elem);

/*
 * Whether part (inside box) is one contiguous run of box's C-order
 * layout; *at receives the element where it starts.
 */
bool tfs_ckpt_box_run(const struct tfs_ckpt_box *part,
                      const struct tfs_ckpt_box *box, uint64_t *at);

/* ---- commit.c -------------------------------------------------------- */

#define TFS_CKPT_LATEST_KEY "latest"

/*
 * Open the store at uri with options; with create, a missing local root
 * directory is made first.
 */
int tfs_ckpt_store_open(const char *uri, const char *options, bool create,
                        struct tfs_store **out);
/* The default staging dir, /var/tmp/tierfs-ckpt-EUID (free with tfs_free). */
char *tfs_ckpt_staging_default(void);
/*
 * Open staging_dir/sub (created 0700 as needed) with tfs_dir_open's
 * checks; the default staging dir is checked from /var/tmp down.
 */
int tfs_ckpt_staging_open(const char *staging_dir, const char *sub,
                          int *out_fd);
/* "step-000100" */
void tfs_ckpt_step_name(char *buf, size_t len, uint64_t step);
/* Parse "step-N" (exactly); false otherwise. */
bool tfs_ckpt_step_parse(const char *s, size_t len, uint64_t *step);
/* "step-000100/name" into b (reset first). */
int tfs_ckpt_key(struct tfs_buf *b, uint64_t step, const char *name);
/* "model-rank00000-00001.safetensors", "rank-00000.done" */
void tfs_ckpt_shard_name(char *buf, size_t len, unsigned rank,
                         unsigned index);
void tfs_ckpt_marker_name(char *buf, size_t len, unsigned rank);

/*
 * Read the whole object key (at most max bytes, else TFS_ETOOBIG) into a
 * NUL-terminated buffer the caller frees with tfs_free.
 */
int tfs_ckpt_get(struct tfs_store *st, const char *key, size_t max,
                 char **out, size_t *len);
/* Whether step has an index. */
int tfs_ckpt_is_committed(struct tfs_store *st, uint64_t step, bool *yes);
/* Committed (or incomplete) steps, ascending; *v freed with tfs_free. */
int tfs_ckpt_steps(struct tfs_store *st, unsigned flags, uint64_t **v,
                   size_t *n);
/*
 * What `latest` names if committed, else the newest; -ENOENT.  With
 * checked not NULL, what `latest` names is returned unchecked (*checked
 * false: the caller must treat a missing index as "fall back").
 */
int tfs_ckpt_find_latest(struct tfs_store *st, uint64_t *step,
                         bool *checked);

/* The rank-0 and rank-r halves of the commit protocol (commit.c). */
struct tfs_ckpt_commit {
    struct tfs_store *st;
    uint64_t          step;
    unsigned          rank;
    unsigned          world_size;
    const char       *run_id;
    const char       *attempt;          /* rank 0's; accepted markers carry
                                           it (world_size > 1) */
    uint64_t          deadline_ns;      /* 0: none */
    uint64_t          timeout_ms;       /* what deadline_ns came from, for
                                           messages */
    uint64_t          grace_ns;         /* ranks > 0 wait this much past
                                           the deadline for rank 0's
                                           abort note */
    const char       *ignore_abort;     /* a nonce whose abort note was
                                           there before this rank opened
                                           (stale: ignored), or NULL */
    unsigned          keep_last;        /* 0: keep all */
    bool             *noted;            /* set when a wait ended on an
                                           abort note; may be NULL */
};

/*
 * Rank 0, opening a step of several ranks: a fresh attempt nonce in
 * out, put as step-N/attempt.  Every rank's marker names the nonce it
 * read there, and rank 0 takes only markers that name its own, so a
 * marker left by an earlier attempt of the step is never committed.
 */
int tfs_ckpt_attempt_start(struct tfs_store *st, uint64_t step,
                           char out[TFS_CKPT_ATTEMPT_LEN]);
/* The current nonce of step ("" when none has been put). */
int tfs_ckpt_attempt_read(struct tfs_store *st, uint64_t step,
                          char out[TFS_CKPT_ATTEMPT_LEN]);
/*
 * Abort notes: step-N/abort, "NONCE RC RANK\nREASON", tied to the attempt
 * nonce it names.  Rank 0 puts one when it gives up on an attempt, a rank
 * when it fails before its deadline; the waits of the other ranks end on
 * it with rc and the reason.  A note naming another nonce is stale.
 */
#define TFS_CKPT_ABORT_NAME "abort"
#define TFS_CKPT_REASON_MAX 512

int tfs_ckpt_abort_put(struct tfs_store *st, uint64_t step,
                       const char *attempt, unsigned rank, int rc,
                       const char *reason);
/*
 * The note of step: 1 with *rc, its rank and reason (TFS_CKPT_REASON_MAX
 * bytes) and its nonce in attempt_out (may be NULL); 0 when there is
 * none.
 */
int tfs_ckpt_abort_read(struct tfs_store *st, uint64_t step, int *rc,
                        unsigned *rank, char *reason,
                        char attempt_out[TFS_CKPT_ATTEMPT_LEN]);
/* "300 s", "1.5 s" */
void tfs_ckpt_fmt_s(char *buf, size_t len, uint64_t ms);
/*
 * Give the calling thread a short deadline (now + CKPT grace) for what is
 * done after the commit deadline (a listing for the error, an abort
 * note); returns the previous one, to be given back to tfs_deadline_set.
 */
uint64_t tfs_ckpt_grace_begin(void);
#define TFS_CKPT_GRACE_NS (5ull * 1000000000ull)

/* Put this rank's marker (after its shards are durable in the store). */
int tfs_ckpt_put_marker(const struct tfs_ckpt_commit *c,
                        const struct tfs_ckpt_marker *m);
/*
 * Rank 0: wait for every rank's marker, write the index, move `latest`
 * forward, apply retention.
 */
int tfs_ckpt_commit_index(const struct tfs_ckpt_commit *c,
                          const struct tfs_ckpt_marker *mine);
/*
 * Other ranks: wait for the index and check that it names this rank's
 * files with the checksums in mine.  While waiting, a new attempt nonce
 * (rank 0 opened after this rank read it) is copied into mine and the
 * marker put again.
 */
int tfs_ckpt_await_index(const struct tfs_ckpt_commit *c,
                         struct tfs_ckpt_marker *mine);
/* Remove one step on st (index first); does not touch `latest`. */
int tfs_ckpt_remove_step(struct tfs_store *st, uint64_t step);
/* Keep the newest keep committed steps; *removed counts removals. */
int tfs_ckpt_retain(struct tfs_store *st, unsigned keep, bool incomplete,
                    bool dry_run, size_t *removed);


/* ---- writer.c, stage.c: one rank's part of one checkpoint ------------- */

struct wr_item {
    char       *name;                   /* owned */
    int         dtype;
    int         ndim;
    int64_t     shape[TFS_CKPT_MAX_DIMS];
    bool        sliced;
    int64_t     offsets[TFS_CKPT_MAX_DIMS];
    int64_t     full_shape[TFS_CKPT_MAX_DIMS];
    const void *data;                   /* borrowed until save returns */
    uint64_t    len;                    /* bytes */
    unsigned    file;                   /* index in w->files */
    uint64_t    begin;                  /* in the file's data buffer */
    uint64_t    end;
    uint64_t    xxh3;                   /* set when the file is finished */
};

struct wr_file {
    char                 name[64];
    char                *path;          /* staging copy, owned */
    char                *tmp;           /* path + ".tmp", owned */
    size_t              *items;         /* indices in w->items, file order */
    size_t               n_items;
    uint64_t             header_size;   /* 8 + N */
    uint64_t             size;          /* bytes of the whole file */
    uint64_t             header_xxh3;
    uint64_t             data_xxh3;
    int                  fd;            /* the tmp file until finished */
    bool                 finished;      /* renamed into place */
    bool                 in_store;      /* uploaded; protected by w->lock */
    bool                 recycled;      /* tmp is an older staging file */
    bool                 direct;        /* its data went out with O_DIRECT */
    struct tfs_pool_task task;          /* one phase, on the upload pool */
    struct tfs_ckpt_writer *w;
};

/* One step of work on one file (staging, finishing, uploading). */
typedef int wr_phase_fn(struct tfs_ckpt_writer *w, struct wr_file *f);

struct tfs_ckpt_writer {
    /* settings */
    unsigned         rank;
    unsigned         world_size;
    uint64_t         shard_size;        /* bytes */
    char            *staging_dir;       /* owned */
    unsigned         staging_keep;
    unsigned         keep_last;
    unsigned         upload_threads;
    uint64_t         upload_bw;         /* bytes/s, 0: none */
    uint64_t         timeout_ms;        /* commit_timeout_ms */
    char            *options;           /* owned, or NULL */
    bool             sync;
    char            *run_id;            /* owned */
    bool             overwrite;
    char            *extra;             /* owned JSON, or NULL */
    /* after open */
    bool             opened;
    bool             saved;
    struct tfs_store *st;               /* owned */
    uint64_t         step;
    char             attempt[TFS_CKPT_ATTEMPT_LEN]; /* rank 0's nonce */
    char             stale_abort[TFS_CKPT_ATTEMPT_LEN]; /* ranks > 0: the
                                           nonce of an abort note there at
                                           open ("" none) */
    uint64_t         deadline_ns;       /* of the background part; 0 none */
    char            *stage_step;        /* STAGING/<ns>/step-N, owned */
    char            *stage_ns;          /* STAGING/<ns>, owned */
    int              stage_fd;          /* stage_step, opened at save */
    /* tensors */
    struct wr_item  *items;             /* owned */
    size_t           n_items;
    size_t           cap_items;
    size_t          *names;             /* hash of names: item + 1, 0 free */
    size_t           cap_names;
    struct wr_file  *files;             /* owned */
    size_t           n_files;
    /* background */
    struct tfs_pool *commit_pool;
    struct tfs_pool *upload_pool;
    struct tfs_pool_task commit_task;
    struct tfs_ratelimit rl;
    uint64_t         total;             /* bytes to upload */
    atomic_uint_fast64_t uploaded;      /* bytes uploaded */
    pthread_mutex_t  lock;
    pthread_cond_t   cond;              /* done, or an upload ended */
    wr_phase_fn     *phase;             /* what the file tasks run */
    unsigned         tasks_left;        /* protected by lock */
    int              tasks_rc;          /* protected by lock */
    bool             done;              /* protected by lock */
    int              status;            /* protected by lock */
    char             detail[512];       /* protected by lock */
    int              level;             /* TFS_CKPT_LEVEL_*, by lock */
    size_t           n_finished;        /* files finished, by lock */
    struct tfs_ckpt_marker *recovered;  /* recovery: the local manifest
                                           (owned), or NULL */
    /* the PEER level (peer.c) */
    char            *group;             /* member list, owned, or NULL */
    char            *group_secret;      /* its secret file, owned */
    char            *group_self;        /* this node's line, or NULL */
    char            *group_tls_ca;      /* owned, or NULL */
    uint64_t         group_timeout_ms;  /* 0: the group's default */
    struct tfs_group *group_h;          /* opened with group, or NULL */
    struct tfs_pool *peer_pool;         /* one thread: the push */
    struct tfs_pool_task peer_task;
    int             *peer_fds;          /* the files, then the manifest */
    int              peer_rc;           /* the push's error; by lock */
    bool             peer_ended;        /* by lock */
    char             peer_detail[512];  /* by lock */
};

/* The local manifest of a rank's finished staging copy (its marker). */
#define TFS_CKPT_LOCAL_FMT "rank-%05u.local"
#define TFS_CKPT_RECOVER_KEY "recover"

/*
 * peer.c: the PEER level.  open: join the group of the writer's group
 * options as a client (nothing when unset; TFS_EOPTION and the group's
 * errors).  start: once LOCAL, push the files and then the manifest to
 * the rank's member on the push thread.  restore: at resume, fetch this
 * rank's newest copy back from the members when staging lacks it (0,
 * also when nothing came: logged; -ENOMEM).  close: end the push, leave.
 */
struct tfs_group;
int tfs_ckpt_peer_open(struct tfs_ckpt_writer *w);
void tfs_ckpt_peer_start(struct tfs_ckpt_writer *w);
int tfs_ckpt_peer_restore(struct tfs_ckpt_writer *w);
void tfs_ckpt_peer_close(struct tfs_ckpt_writer *w);
/*
 * From a member's list of copies (NUL-terminated text: "tierfs-ckpt-list
 * 1", then "STEP NAME SIZE" lines): 1 with the newest step that holds
 * name (a rank's manifest), 0 when none, TFS_EFORMAT for text that is
 * not such a list.  Fuzzed (tests/fuzz/fuzz_ckpt_peer.c).
 */
int tfs_ckpt_peer_newest(const char *text, const char *name, uint64_t *step);

/* writer.c, for recover.c. */
int tfs_ckpt_wr_staging_paths(struct tfs_ckpt_writer *w);
int tfs_ckpt_wr_pools(struct tfs_ckpt_writer *w);
int tfs_ckpt_wr_commit(struct tfs_ckpt_writer *w);
void tfs_ckpt_wr_end(struct tfs_ckpt_writer *w, int rc);

/*
 * stage.c.  header: encode f's header into b from its items' checksums.
 * file: write f's tensors into its tmp file (the part the caller waits
 * for).  finish: checksums, header, fsync, rename, directory fsync (a
 * no-op when done).  recycle: before staging, turn this rank's files of
 * older steps into the new tmp files, to be rewritten in place.  prune:
 * after a commit, keep this rank's newest staging_keep steps.  discard:
 * close and remove the tmp files of a save that failed.
 */
int tfs_ckpt_stage_header(const struct tfs_ckpt_writer *w,
                          const struct wr_file *f, struct tfs_buf *b);
int tfs_ckpt_stage_file(struct tfs_ckpt_writer *w, struct wr_file *f);
int tfs_ckpt_stage_finish(struct tfs_ckpt_writer *w, struct wr_file *f);
void tfs_ckpt_stage_recycle(struct tfs_ckpt_writer *w);
void tfs_ckpt_stage_prune(struct tfs_ckpt_writer *w);
void tfs_ckpt_stage_discard(struct tfs_ckpt_writer *w);
/*
 * The local manifest: m written to STAGE_STEP/rank-R.local (tmp, fsync,
 * rename, directory fsync), last, once every file is finished; removed
 * (unlink_manifest) before a step's files are rewritten.  load_manifest:
 * parse the manifest of rank in the staging dir at dir and check every
 * file it names (size, header and data checksums): 0, -ENOENT (none), or
 * TFS_EFORMAT / TFS_ECORRUPT naming the file.
 */
int tfs_ckpt_stage_manifest(struct tfs_ckpt_writer *w,
                            const struct tfs_ckpt_marker *m);
void tfs_ckpt_stage_unlink_manifest(struct tfs_ckpt_writer *w, int dfd);
int tfs_ckpt_stage_load_manifest(const char *dir, unsigned rank,
                                 struct tfs_ckpt_marker *out);

/* ---- reader.c, stream.c: one committed checkpoint ------------------- */

struct rd_piece {
    size_t              tensor;         /* index in r->tensors */
    size_t              file;           /* index in r->files */
    uint64_t            begin;          /* absolute offsets in the file */
    uint64_t            end;
    struct tfs_ckpt_box box;            /* place in the full tensor */
    uint64_t            xxh3;
};

struct rd_tensor {
    char     *name;                     /* owned */
    int       dtype;
    int       ndim;
    int64_t   shape[TFS_CKPT_MAX_DIMS]; /* of the full tensor */
    uint64_t  nbytes;
    size_t   *pieces;                   /* indices in r->pieces, owned */
    size_t    n_pieces;
};

struct rd_file {
    const struct tfs_ckpt_file_info *info; /* in r->ix */
    char     *key;                      /* "step-N/name", owned */
    char     *local_path;               /* staging copy, owned, or NULL */
    int       local_fd;                 /* -1: read from the store */
    char      version[TFS_VERSION_MAX]; /* of the store copy, or "" */
    struct tfs_ckpt_st_header hdr;      /* during open only */
    int       rc;                       /* of loading the header */
    char      detail[512];
    struct tfs_pool_task task;
    struct tfs_ckpt_reader *r;
};

enum rd_state { RD_QUEUED, RD_RUNNING, RD_DONE };

struct rd_req {
    uint64_t            id;
    size_t              tensor;
    struct tfs_ckpt_box box;
    void               *buf;            /* borrowed */
    size_t              len;
    uint64_t            sort_file;      /* first piece: file, offset */
    uint64_t            sort_off;
    enum rd_state       state;          /* protected by r->lock */
    int                 rc;             /* protected by r->lock */
    char               *detail;         /* owned, protected by r->lock */
    bool                queued;         /* handed to the pool */
    struct tfs_pool_task task;
    struct tfs_ckpt_reader *r;
};

struct tfs_ckpt_reader {
    /* settings */
    char             *staging_dir;      /* owned */
    char             *options;          /* owned, or NULL */
    char             *index_given;      /* owned, or NULL: option "index" */
    unsigned          threads;
    bool              use_staging;
    /* after open */
    char             *index_text;       /* owned: the index as parsed */
    size_t            index_len;
    bool              opened;
    struct tfs_store *st;               /* owned */
    uint64_t          step;
    struct tfs_ckpt_index ix;
    struct rd_file   *files;            /* owned, as in the index */
    size_t            n_files;
    struct rd_tensor *tensors;          /* owned, weight_map order */
    size_t            n_tensors;
    size_t           *names;            /* hash: tensor + 1, 0 free */
    size_t            cap_names;
    struct rd_piece  *pieces;           /* owned, by file and offset */
    size_t            n_pieces;
    struct tfs_pool  *pool;
    /* streaming */
    pthread_mutex_t   lock;
    pthread_cond_t    cond;             /* a request finished */
    struct rd_req   **reqs;             /* protected by lock */
    size_t            n_reqs;           /* protected by lock */
    size_t            cap_reqs;         /* protected by lock */
    bool              started;          /* protected by lock */
    bool              closing;          /* protected by lock */
};

/*
 * reader.c, for stream.c.  rd_box: check a box of tensor i and the buffer
 * length it needs.  rd_do: fill buf with a box of tensor ti from every
 * saved piece that intersects it, checksums checked.  rd_store: read
 * [off, off+len) of file f from the store, exactly.
 */
int tfs_ckpt_rd_box(struct tfs_ckpt_reader *r, size_t i, int ndim,
                    const int64_t *offsets, const int64_t *sizes, size_t len,
                    struct tfs_ckpt_box *box);
int tfs_ckpt_rd_do(struct tfs_ckpt_reader *r, size_t ti,
                   const struct tfs_ckpt_box *box, void *buf);
int tfs_ckpt_rd_store(struct tfs_ckpt_reader *r, const struct rd_file *f,
                      void *buf, size_t len, uint64_t off);
bool tfs_ckpt_rd_box_eq(const struct tfs_ckpt_box *a,
                        const struct tfs_ckpt_box *b);

#endif /* TFS_CKPT_INT_H */
