/* SPDX-License-Identifier: MIT */
/*
 * tierfs bench ckpt: save and restore of a synthetic sharded checkpoint
 * with the checkpoint library (include/tierfs/ckpt.h), timed the way a
 * training job meets it: how long save() blocks the caller, how long
 * until the checkpoint is committed in the store (durable), and how long
 * a restore from the store alone takes (a new node: the staging copy is
 * not used), to the first tensor and to the last.  Every restored byte
 * is compared with what was saved.
 *
 * It writes under TARGET/tierfs-bench-ckpt/ (step 1, replaced by the
 * next run) and removes the step afterwards, so a real checkpoint root
 * given as TARGET is never touched.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/bench.h"
#include "tierfs/ckpt.h"

#define CKPT_TENSORS 16
#define CKPT_STEP    1

/* TARGET/tierfs-bench-ckpt, keeping a URI's query at the end. */
static char *ckpt_root(const char *target)
{
    const char *q = strchr(target, '?');
    size_t plen = q != NULL ? (size_t)(q - target) : strlen(target);
    struct tfs_buf b;

    tfs_buf_init(&b, 0);
    while (plen > 1 && target[plen - 1] == '/')
        plen--;
    if (tfs_buf_append(&b, target, plen) < 0 ||
        tfs_buf_puts(&b, "/tierfs-bench-ckpt") < 0 ||
        (q != NULL && tfs_buf_puts(&b, q) < 0)) {
        tfs_buf_cleanup(&b);
        return NULL;
    }
    return b.p;
}

static void ckpt_fill(unsigned char *p, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15u + 1;

    for (size_t i = 0; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (size_t i = len & ~(size_t)7; i < len; i++)
        p[i] = (unsigned char)(i * 131u);
}

static int ckpt_save(const struct bench_opts *o, const char *root,
                     const unsigned char *data, uint64_t per,
                     struct bench_result *r)
{
    struct tfs_ckpt_writer *w = NULL;
    char shard[24];
    char threads[16];
    uint64_t t0;
    uint64_t t1;
    int rc = tfs_ckpt_writer_create(&w);

    snprintf(shard, sizeof(shard), "%" PRIu64,
             TFS_MAX(per * CKPT_TENSORS / o->shards, (uint64_t)1 << 20));
    snprintf(threads, sizeof(threads), "%u", o->threads);
    if (rc == 0)
        rc = tfs_ckpt_writer_set(w, "shard_size", shard);
    if (rc == 0)
        rc = tfs_ckpt_writer_set(w, "upload_threads", threads);
    if (rc == 0)
        rc = tfs_ckpt_writer_set(w, "staging_keep", "0");
    if (rc == 0)
        rc = tfs_ckpt_writer_set(w, "overwrite", "1");
    if (rc == 0)
        rc = tfs_ckpt_writer_open(w, root, CKPT_STEP);
    for (unsigned i = 0; rc == 0 && i < CKPT_TENSORS; i++) {
        char name[32];
        int64_t shape = (int64_t)per;

        snprintf(name, sizeof(name), "layer%02u.weight", i);
        rc = tfs_ckpt_writer_add(w, name, "U8", 1, &shape, data + i * per,
                                 (size_t)per);
    }
    t0 = tfs_now_ns();
    if (rc == 0)
        rc = tfs_ckpt_writer_save(w);
    t1 = tfs_now_ns();
    if (rc == 0)
        rc = tfs_ckpt_writer_wait(w, -1);
    if (rc == 0) {
        r->ckpt_blocked_s = (double)(t1 - t0) / 1e9;
        r->ckpt_durable_s = (double)(tfs_now_ns() - t0) / 1e9;
    }
    tfs_ckpt_writer_close(w);
    return rc;
}

static int ckpt_restore(const struct bench_opts *o, const char *root,
                        const unsigned char *data, unsigned char *back,
                        uint64_t per, struct bench_result *r)
{
    struct tfs_ckpt_reader *rd = NULL;
    uint64_t ids[CKPT_TENSORS];
    size_t n_tensors = 0;
    size_t n_files = 0;
    uint64_t t0 = tfs_now_ns();
    char threads[16];
    int rc = tfs_ckpt_reader_create(&rd);

    snprintf(threads, sizeof(threads), "%u", o->threads);
    if (rc == 0)
        rc = tfs_ckpt_reader_set(rd, "use_staging", "0");
    if (rc == 0)
        rc = tfs_ckpt_reader_set(rd, "threads", threads);
    if (rc == 0)
        rc = tfs_ckpt_reader_open(rd, root, CKPT_STEP);
    if (rc == 0) {
        tfs_ckpt_reader_info(rd, NULL, NULL, NULL, &n_tensors, &n_files);
        if (n_tensors != CKPT_TENSORS)
            rc = tfs_err(TFS_EFORMAT, "the checkpoint has %zu tensors, "
                         "not the %u saved", n_tensors, CKPT_TENSORS);
    }
    /* Index order is name order: layer00 .. layer15, as saved. */
    for (size_t i = 0; rc == 0 && i < CKPT_TENSORS; i++)
        rc = tfs_ckpt_reader_submit(rd, i, 0, NULL, NULL, back + i * per,
                                    (size_t)per, &ids[i]);
    if (rc == 0)
        rc = tfs_ckpt_reader_start(rd);
    for (size_t i = 0; rc == 0 && i < CKPT_TENSORS; i++) {
        rc = tfs_ckpt_reader_wait(rd, ids[i], -1);
        if (rc == 0 && i == 0)
            r->ckpt_first_s = (double)(tfs_now_ns() - t0) / 1e9;
    }
    if (rc == 0)
        r->ckpt_restore_s = (double)(tfs_now_ns() - t0) / 1e9;
    r->ckpt_files = n_files;
    tfs_ckpt_reader_close(rd);
    if (rc == 0 && memcmp(data, back, (size_t)(per * CKPT_TENSORS)) != 0)
        rc = tfs_err(TFS_ECORRUPT, "the restored checkpoint differs from "
                     "the saved one");
    return rc;
}

int bench_ckpt(const struct bench_opts *o, struct bench_result *r)
{
    uint64_t per = o->file_size / CKPT_TENSORS;
    char *root = ckpt_root(o->target);
    unsigned char *data = NULL;
    unsigned char *back = NULL;
    int rc = 0;

    r->workload = "ckpt";
    if (root == NULL)
        return -ENOMEM;
    if (per == 0 || o->file_size > ((uint64_t)1 << 40))
        rc = tfs_err(-EINVAL, "--size %llu: want 16 bytes to 1 TiB",
                     (unsigned long long)o->file_size);
    if (rc == 0) {
        data = tfs_malloc_faulted((size_t)(per * CKPT_TENSORS));
        back = tfs_malloc_faulted((size_t)(per * CKPT_TENSORS));
        rc = data != NULL && back != NULL ? 0 : -ENOMEM;
    }
    if (rc == 0) {
        ckpt_fill(data, (size_t)(per * CKPT_TENSORS), o->seed);
        rc = ckpt_save(o, root, data, per, r);
    }
    if (rc == 0)
        rc = ckpt_restore(o, root, data, back, per, r);
    if (rc == 0) {
        r->bytes = per * CKPT_TENSORS;
        r->ops = CKPT_TENSORS;
        r->seconds = r->ckpt_durable_s + r->ckpt_restore_s;
    }
    if (data != NULL && back != NULL) { /* the step was opened: remove it */
        char detail[512];
        int rm;

        snprintf(detail, sizeof(detail), "%s", tfs_errdetail());
        rm = tfs_ckpt_remove(root, NULL, CKPT_STEP);
        if (rc == 0 && rm < 0 && rm != -ENOENT)
            rc = rm;
        else if (rc < 0)
            tfs_errdetail_set("%s", detail);
    }
    tfs_free_faulted(data);
    tfs_free_faulted(back);
    tfs_free(root);
    return rc;
}
