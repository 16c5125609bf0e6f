/* SPDX-License-Identifier: MIT */
/*
 * Checkpoints: sharded safetensors files in a store, committed atomically,
 * restored lazily.
 *
 * Layout under a checkpoint root URI (docs/ckpt.md has the details):
 *
 *   URI/step-000100/model-rank00000-00001.safetensors   rank 0's shards
 *   URI/step-000100/model-rank00001-00001.safetensors   rank 1's shards
 *   URI/step-000100/rank-00000.done                     per-rank markers
 *   URI/step-000100/rank-00001.done
 *   URI/step-000100/model.safetensors.index.json        written last
 *   URI/latest                                          "step-000100\n"
 *
 * A checkpoint exists for readers only once its index exists.  Saving is
 * two-phase: tfs_ckpt_writer_save() copies the tensors into local staging
 * files (the only part that blocks the caller), then a background thread
 * finishes the staging files (checksums, header, fsync, rename), uploads
 * them, writes this rank's marker and, on rank 0, waits for every rank's
 * marker, writes the index, moves `latest` and applies retention.
 *
 * Every function is flat and ctypes-friendly: opaque handles, integers,
 * NUL-terminated strings and caller buffers with lengths.  Results come
 * back in out-parameters written only on success.  Errors are 0, -errno
 * or TFS_E* (err.h); the detail (tfs_errdetail()) names the file and the
 * cause.  No function calls back into the caller from a library thread:
 * callers poll (is_done) or block (wait).
 */
#ifndef TIERFS_CKPT_H
#define TIERFS_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tierfs/api.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tfs_ckpt_writer;
struct tfs_ckpt_reader;

#define TFS_CKPT_MAX_DIMS 16            /* dimensions of one tensor */
#define TFS_CKPT_STEP_LATEST (-1)       /* "the latest committed step" */

/* ---- writer: one rank's part of one checkpoint ----------------------- */

/*
 * Create a writer with defaults: rank 0 of 1, shards of at most 512 MiB,
 * staging under $TIERFS_CKPT_STAGING or /var/tmp/tierfs-ckpt-EUID, 4 upload
 * threads, no bandwidth cap, keep every checkpoint, a 5 minute commit
 * timeout.  Free with tfs_ckpt_writer_close.  -ENOMEM.
 */
TFS_API int tfs_ckpt_writer_create(struct tfs_ckpt_writer **out);

/*
 * Set one option before tfs_ckpt_writer_open: TFS_EOPTION for a bad name
 * or value (the detail names the option, the value and the range),
 * -EBUSY once opened.  Values are strings, copied:
 *
 *   rank            this writer's rank (default 0; 0..99999), below ...
 *   world_size      ... the number of ranks (default 1; 1..100000);
 *                   checked at open.  Rank 0 writes the index; the other
 *                   ranks wait until it appears.
 *   shard_size      the most bytes of tensor data per shard file (a
 *                   bigger tensor gets a file of its own); a size, at
 *                   least 1M (default 512M)
 *   staging_dir     the local directory for staging copies (not empty)
 *   staging_keep    how many of this rank's newest local staging copies
 *                   to keep after a commit (default 1; 0 removes them
 *                   once committed)
 *   keep_last       rank 0 deletes all but the newest n committed
 *                   checkpoints after committing (default 0: keep all)
 *   upload_threads  upload threads (default 4; 1..64)
 *   upload_bw       an upload bandwidth cap in bytes/s, a size (default
 *                   0: none)
 *   commit_timeout_ms  (alias timeout_ms) the most the background
 *                   part may take on this rank, from the end of save():
 *                   finishing, uploads (a hanging one is cut at the
 *                   deadline, or abandoned 1 s past it), the marker and
 *                   the wait for the markers (rank 0) or the index
 *                   (others, which wait up to 5 s longer for rank 0's
 *                   abort note); also bounds open's store calls.
 *                   Default 300000 (5 min); 0: no deadline
 *   options         store options ("k=v&k2=v2") merged over the URI's
 *                   query
 *   sync            1: tfs_ckpt_writer_save also finishes the staging
 *                   files (checksums, fsync, rename) before returning
 *   run_id          an id shared by the ranks of one save; rank 0 accepts
 *                   only markers carrying the same id ("": any)
 *   overwrite       1: allow saving a step that is already committed (its
 *                   index is removed first, so it stops existing until
 *                   the new one commits)
 *   extra           a JSON document stored with this rank's part and
 *                   returned by tfs_ckpt_reader_extra (the Python binding
 *                   keeps the structure of the state dict and its
 *                   non-tensor values there); TFS_EFORMAT if it does not
 *                   parse
 */
TFS_API int tfs_ckpt_writer_set(struct tfs_ckpt_writer *w, const char *name,
                                const char *value);

/*
 * Open the store at uri (the checkpoint root; a missing local directory
 * is created) and begin step.  Removes this rank's stale marker of the
 * same step.  -EEXIST if step is already committed and overwrite is off;
 * TFS_EOPTION if rank is not below world_size; store errors.
 */
TFS_API int tfs_ckpt_writer_open(struct tfs_ckpt_writer *w, const char *uri,
                                 uint64_t step);

/*
 * Add a tensor: name (unique within this rank), dtype (a safetensors
 * dtype string: "F32", "BF16", "I64", "BOOL", ...), ndim dimensions of
 * shape (ndim 0 is a scalar), and its len bytes at data in C order,
 * little-endian.  len must equal the product of shape times the dtype
 * size.  The writer borrows data until tfs_ckpt_writer_save returns.
 * -EINVAL (bad shape, dtype or length; the detail says which), -EEXIST
 * (name added twice), -EBUSY (after save), -ENOMEM.
 */
TFS_API int tfs_ckpt_writer_add(struct tfs_ckpt_writer *w, const char *name,
                                const char *dtype, int ndim,
                                const int64_t *shape, const void *data,
                                size_t len);

/*
 * The same for a slice of a larger tensor (FSDP / ZeRO style): shape is
 * the slice's, offsets where it starts in the full tensor of full_shape
 * (all ndim long).  Recorded in the shard's __metadata__ as
 * DCP_SHARDING_INFO {name: {"saved_offsets": offsets}}, as PyTorch's
 * Hugging Face storage writer does.  The slices of one name, across all
 * ranks, must not partly overlap.
 */
TFS_API int tfs_ckpt_writer_add_slice(struct tfs_ckpt_writer *w,
                                      const char *name, const char *dtype,
                                      int ndim, const int64_t *shape,
                                      const int64_t *offsets,
                                      const int64_t *full_shape,
                                      const void *data, size_t len);

/*
 * Snapshot every added tensor into the local staging files, then start
 * the background commit.  Returns once the tensors have been copied (and,
 * with sync, the staging files are durable): the caller may reuse
 * their memory.  If save fails nothing runs in the background.  A writer
 * saves once.
 */
TFS_API int tfs_ckpt_writer_save(struct tfs_ckpt_writer *w);

/*
 * Wait up to timeout_ms (negative: forever) for the background commit.
 * Returns its status: 0 once the checkpoint is committed (for every rank:
 * the index names this rank's shards), -EINPROGRESS if still running at
 * the timeout, or the error that ended it, with its detail naming the
 * step, the rank and what it last did: -ETIMEDOUT when an upload, a
 * rank's marker or the index did not come within commit_timeout_ms, or
 * the error of the rank that aborted the attempt (its abort note: rank 0
 * puts one when it gives up, any rank when it fails before its
 * deadline, and every other rank's wait ends on it).  -EINVAL before
 * save.  Thread-safe.
 */
TFS_API int tfs_ckpt_writer_wait(struct tfs_ckpt_writer *w,
                                 int64_t timeout_ms);
/*
 * Durability levels of a save, in order.  LOCAL: this rank's staging copy
 * is finished (checksums, header, fsync, rename, directory fsync) and its
 * local manifest (rank-R.local, naming the files, sizes, checksums, rank,
 * world size and run id) written and fsynced last: it survives the
 * trainer's crash and tfs_ckpt_writer_recover can commit it.  PEER: a copy
 * on another node of the cache group; not built (there is no push path to
 * a peer): never reported, and waiting for it is -ENOTSUP.  STORE:
 * committed (what tfs_ckpt_writer_wait waits for).
 */
#define TFS_CKPT_LEVEL_NONE  0
#define TFS_CKPT_LEVEL_LOCAL 1
#define TFS_CKPT_LEVEL_PEER  2
#define TFS_CKPT_LEVEL_STORE 3

/*
 * The level reached so far (NONE before save, or when save failed).  A
 * save whose local copy completed and whose upload then failed stays
 * LOCAL.  Thread-safe.
 */
TFS_API int tfs_ckpt_writer_level(struct tfs_ckpt_writer *w);
/*
 * Wait up to timeout_ms (negative: forever) for level: 0 once reached,
 * -EINPROGRESS at the timeout, the save's error once it is known and the
 * level was not reached (a save whose local copy completed but whose
 * upload failed: LOCAL returns 0, STORE the error).  -ENOTSUP for PEER
 * ("no cache group configured: the peer level needs one"), -EINVAL for
 * another level or before save.  Thread-safe.
 */
TFS_API int tfs_ckpt_writer_wait_level(struct tfs_ckpt_writer *w, int level,
                                       int64_t timeout_ms);
/*
 * Recovery of a locally complete, uncommitted save (a job killed after
 * its staging copy was finished, before the commit).  On a writer created
 * and set (rank, world_size, staging_dir, run_id, commit_timeout_ms,
 * options, keep_last, staging_keep; nothing opened or added), under the
 * root uri:
 *
 *   rank 0 finds the newest committed step C and the newest step S > C
 *   whose finished copy is in its staging (its local manifest, every
 *   file checked against it: size, header and data checksums) for this
 *   rank and world size; with several ranks it opens an attempt of S
 *   (nonce) and puts its decision, ROOT/recover ("S" or none, with the
 *   run id, which several ranks need: without one nothing is recovered);
 *   the other ranks wait for the decision carrying their run id;
 *   every rank holding S then uploads its files and puts its marker,
 *   rank 0 commits it through the commit protocol; a rank whose staging
 *   lacks S puts an abort note at once, so nobody commits it.
 *
 * All of it within commit_timeout_ms (default 5 min) from the call.
 * Returns 1 with *step = S once S is committed, 0 when there was nothing
 * to recover or the recovery did not commit (logged as a warning with the
 * reason, also left as the thread's detail): the caller then resumes from
 * the newest committed step.  Negative for a store error before any
 * decision (-EACCES, -ETIMEDOUT, ...), -EBUSY on a writer already used,
 * TFS_EOPTION (rank not below world_size).  The writer can only be closed
 * afterwards.
 */
TFS_API int tfs_ckpt_writer_recover(struct tfs_ckpt_writer *w,
                                    const char *uri, uint64_t *step);
/* True once the background commit has ended (committed or failed). */
TFS_API bool tfs_ckpt_writer_is_done(struct tfs_ckpt_writer *w);
/* Bytes uploaded so far and bytes to upload in all.  Thread-safe. */
TFS_API void tfs_ckpt_writer_progress(struct tfs_ckpt_writer *w,
                                      uint64_t *uploaded, uint64_t *total);
/*
 * Wait for the background commit to end, then free everything (also for
 * a writer never opened).  NULL is a no-op.
 */
TFS_API void tfs_ckpt_writer_close(struct tfs_ckpt_writer *w);

/* ---- reader: one committed checkpoint -------------------------------- */

/*
 * Create a reader: 4 threads, staging looked up under the same default
 * directory as the writer's.  Free with tfs_ckpt_reader_close.  -ENOMEM.
 */
TFS_API int tfs_ckpt_reader_create(struct tfs_ckpt_reader **out);
/*
 * Set one option before open, as tfs_ckpt_writer_set (TFS_EOPTION with
 * the detail, -EBUSY once opened):
 *
 *   staging_dir   where to look for local staging copies (not empty)
 *   threads       streaming threads (default 4; 1..256)
 *   options       store options ("k=v&k2=v2") merged over the URI's query
 *   use_staging   0: never read from the local staging copy (default 1)
 *   index         the text of the index (as tfs_ckpt_reader_index gave
 *                 it in another process): open reads no `latest`, lists
 *                 nothing and does not GET the index, but checks the
 *                 text exactly as a fetched one (parsed, its step the one
 *                 asked for unless TFS_CKPT_STEP_LATEST, then every
 *                 shard's header against it).  At most 64 MiB.
 */
TFS_API int tfs_ckpt_reader_set(struct tfs_ckpt_reader *r, const char *name,
                                const char *value);

/*
 * Open step (TFS_CKPT_STEP_LATEST: the one `latest` names, else the
 * newest committed) under the root uri: read the index and the header of
 * every shard (from the intact local staging copy when there is one).
 * -ENOENT (no such committed checkpoint), TFS_EFORMAT (bad index or
 * shard: the detail names the file and the cause), TFS_ECORRUPT (a shard
 * does not match its index), store errors.
 */
TFS_API int tfs_ckpt_reader_open(struct tfs_ckpt_reader *r, const char *uri,
                                 int64_t step);

/*
 * The index text the open reader parsed (NUL-terminated, *len bytes; len
 * may be NULL), valid until close: what one rank hands the others for
 * the option "index".  -EINVAL before open.
 */
TFS_API int tfs_ckpt_reader_index(struct tfs_ckpt_reader *r,
                                  const char **json, size_t *len);

/* Facts of the open checkpoint.  Any out pointer may be NULL. */
TFS_API void tfs_ckpt_reader_info(struct tfs_ckpt_reader *r, uint64_t *step,
                                  unsigned *world_size, uint64_t *total_size,
                                  size_t *n_tensors, size_t *n_files);

/*
 * The i-th tensor (i < n_tensors, in index order): its name, dtype, ndim,
 * full shape (TFS_CKPT_MAX_DIMS entries of room) and full size in bytes.
 * Strings are valid until close.  -ERANGE.
 */
TFS_API int tfs_ckpt_reader_tensor(struct tfs_ckpt_reader *r, size_t i,
                                   const char **name, const char **dtype,
                                   int *ndim, int64_t *shape,
                                   uint64_t *nbytes);
/* The index of the tensor called name, or -ENOENT. */
TFS_API int tfs_ckpt_reader_find(struct tfs_ckpt_reader *r, const char *name,
                                 size_t *i);
/*
 * How the tensor was saved: the number of slices (1 for a whole tensor),
 * and the offsets and shape of slice j (TFS_CKPT_MAX_DIMS entries each).
 */
TFS_API int tfs_ckpt_reader_slices(struct tfs_ckpt_reader *r, size_t i,
                                   size_t *n_slices);
TFS_API int tfs_ckpt_reader_slice(struct tfs_ckpt_reader *r, size_t i,
                                  size_t j, int64_t *offsets, int64_t *shape);

/*
 * The i-th file (i < n_files): its name, the rank that wrote it, its
 * size, and whether it is read from the local staging copy.
 */
TFS_API int tfs_ckpt_reader_file(struct tfs_ckpt_reader *r, size_t i,
                                 const char **name, unsigned *rank,
                                 uint64_t *size, bool *local);

/*
 * The JSON document rank set as the writer's extra option ("null" when
 * none), valid until close.  -ERANGE for a rank outside the world.
 */
TFS_API int tfs_ckpt_reader_extra(struct tfs_ckpt_reader *r, unsigned rank,
                                  const char **json);

/*
 * Read tensor i into buf (len bytes: exactly its size), or the box of it
 * starting at offsets with shape sizes (ndim must match; sub-byte dtypes
 * only whole).  Assembled from whichever saved slices cover it; every
 * saved slice read is checked against its checksum first: a mismatch is
 * TFS_ECORRUPT naming the tensor and the file, and no data is returned.
 * Runs on the calling thread.  -EINVAL (bad box or len), TFS_EFORMAT
 * (slices do not cover the box), store errors.
 */
TFS_API int tfs_ckpt_reader_read(struct tfs_ckpt_reader *r, size_t i,
                                 void *buf, size_t len);
TFS_API int tfs_ckpt_reader_read_box(struct tfs_ckpt_reader *r, size_t i,
                                     int ndim, const int64_t *offsets,
                                     const int64_t *sizes, void *buf,
                                     size_t len);

/*
 * Background streaming.  submit queues a read of tensor i (offsets NULL:
 * the whole tensor) into buf and returns its id; the reader borrows buf
 * until the read has ended (wait returned for it) or close.  start
 * begins reading queued items in file order on the reader's threads
 * (items submitted later are queued at once).  wait blocks up to
 * timeout_ms (negative: forever) for item id: if no thread has begun it,
 * the calling thread reads it itself, so the first item a caller needs is
 * never stuck behind the others.  Returns the item's status, or
 * -EINPROGRESS if it is still being read at the timeout.  is_ready polls.
 * Thread-safe.
 */
TFS_API int tfs_ckpt_reader_submit(struct tfs_ckpt_reader *r, size_t i,
                                   int ndim, const int64_t *offsets,
                                   const int64_t *sizes, void *buf,
                                   size_t len, uint64_t *id);
TFS_API int tfs_ckpt_reader_start(struct tfs_ckpt_reader *r);
TFS_API int tfs_ckpt_reader_wait(struct tfs_ckpt_reader *r, uint64_t id,
                                 int64_t timeout_ms);
TFS_API bool tfs_ckpt_reader_is_ready(struct tfs_ckpt_reader *r,
                                      uint64_t id);

/*
 * Read every byte of every shard from the store (never the staging copy)
 * and check the file sizes, the header and data checksums of the index,
 * and every tensor's checksum.  *bytes (may be NULL) receives the bytes
 * read.  TFS_ECORRUPT / TFS_EFORMAT naming the first bad file or tensor.
 */
TFS_API int tfs_ckpt_reader_verify(struct tfs_ckpt_reader *r,
                                   uint64_t *bytes);

/*
 * Cancel queued reads, wait for running ones, free (also for a reader
 * never opened).  NULL is a no-op.
 */
TFS_API void tfs_ckpt_reader_close(struct tfs_ckpt_reader *r);

/* ---- listing and retention ------------------------------------------- */

#define TFS_CKPT_LIST_INCOMPLETE 0x1u   /* list steps without an index */

/*
 * The committed steps under uri in ascending order (or, with
 * TFS_CKPT_LIST_INCOMPLETE, the step directories without an index).  Up
 * to max go to steps; *n receives how many there are (more than max:
 * call again with room).
 */
TFS_API int tfs_ckpt_list(const char *uri, const char *options,
                          unsigned flags, uint64_t *steps, size_t max,
                          size_t *n);
/* What the index of one committed checkpoint says. */
struct tfs_ckpt_summary {
    uint64_t step;
    unsigned world_size;
    uint64_t total_size;                /* bytes of tensor data */
    uint64_t file_bytes;                /* bytes of the shard files */
    size_t   n_files;
    size_t   n_tensors;
    int64_t  created_ns;                /* wall clock, at commit */
};

/* Read step's index only.  -ENOENT if step is not committed. */
TFS_API int tfs_ckpt_summary(const char *uri, const char *options,
                             uint64_t step, struct tfs_ckpt_summary *out);

/* The step `latest` names if committed, else the newest; -ENOENT. */
TFS_API int tfs_ckpt_latest(const char *uri, const char *options,
                            uint64_t *step);
/*
 * Remove step: the index first (the checkpoint stops existing), then its
 * other objects; `latest` is moved to the newest remaining checkpoint (or
 * removed).  -ENOENT if there is nothing under the step.
 */
TFS_API int tfs_ckpt_remove(const char *uri, const char *options,
                            uint64_t step);
/*
 * Keep the newest keep committed checkpoints (at least 1), remove the
 * older ones and the incomplete step directories older than the newest
 * committed one.  *removed (may be NULL) receives the number of steps
 * removed.  With dry_run nothing is removed.
 */
TFS_API int tfs_ckpt_gc(const char *uri, const char *options, unsigned keep,
                        bool dry_run, size_t *removed);

/*
 * Split "ROOT/STEP" where STEP is "step-N", "N" or "latest" into ROOT
 * (written to root, room root_len, with the query kept) and *step
 * (TFS_CKPT_STEP_LATEST for "latest" or when the last part is not a
 * step: then root is the whole uri).  -ENAMETOOLONG, TFS_EURI.
 */
TFS_API int tfs_ckpt_split_uri(const char *uri, char *root, size_t root_len,
                               int64_t *step);

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_CKPT_H */
