/* SPDX-License-Identifier: MIT */
/*
 * The packer's two halves (not installed): plan.c decides what goes
 * where (the listing, names, samples, shards, and which shards a former
 * run finished); write.c reads the sources and writes the shards, their
 * indexes and the manifest.
 */
#ifndef TFS_PACK_WRITE_INT_H
#define TFS_PACK_WRITE_INT_H

#include <pthread.h>

#include "common/util.h"
#include "pack/pack_int.h"

/* A source file: one tar member. */
struct pack_item {
    char    *key;                       /* owned: source key */
    char    *name;                      /* into key: the member name */
    uint64_t size;
    int64_t  mtime_s;
    char     version[TFS_VERSION_MAX];
    uint16_t name_len;
    uint16_t key_len;                   /* name[key_len] == '.' */
    bool     sample_start;              /* first member of its sample */
};

/* A shard of the plan. */
struct pack_plan_shard {
    size_t                 first;       /* first item */
    size_t                 n_items;
    size_t                 n_samples;
    uint64_t               tar_size;    /* as planned, exactly */
    uint64_t               src_bytes;
    uint64_t               plan_xxh3;
    bool                   keep;        /* complete from a former run */
    struct pack_shard_info info;        /* manifest entry once done */
};

/* A read-ahead slot of the pipeline. */
struct pack_slot {
    unsigned char *buf;                 /* owned: the file's bytes */
    size_t         todo;                /* position in w->todo it holds */
    bool           ready;
};

/* One run of the packer (tfs_pack_write). */
struct pack_job {
    struct tfs_store                 *src;
    struct tfs_store                 *dst;
    const char                       *src_prefix;
    struct tfs_buf                    dst_prefix;
    const struct tfs_pack_write_opts *o;
    struct pack_item                 *items;     /* owned */
    size_t                            n_items;
    size_t                            cap;
    struct pack_plan_shard           *shards;    /* owned */
    size_t                            n_shards;
    struct tfs_pack_progress          pr;
    uint64_t                          t0;
    uint64_t                          last_progress;
    /* the read pipeline */
    size_t                           *todo;      /* item numbers */
    size_t                            n_todo;
    struct pack_slot                 *slots;     /* owned */
    size_t                            n_slots;
    pthread_mutex_t                   lock;
    pthread_cond_t                    cond;
    size_t                            next;      /* lock: next to claim */
    size_t                            written;   /* lock: consumed */
    uint64_t                          inflight;  /* lock: bytes held */
    int                               rc;        /* lock: first error */
    char                              detail[512]; /* lock: of rc */
};

/* List the source, check its names, group samples and cut shards. */
int tfs_pack_plan(struct pack_job *w);
/*
 * Mark the shards a former run completed (w->shards[i].keep, counted in
 * w->pr); when some are not, remove the old manifest first.
 */
int tfs_pack_plan_resume(struct pack_job *w);
/* The key of shard i's file with extension ext ("tar", "idx"). */
int tfs_pack_shard_key(const struct pack_job *w, size_t i, const char *ext,
                       struct tfs_buf *out);
/* Fill shard s's manifest entry, given its index file's bytes. */
void tfs_pack_shard_done(struct pack_plan_shard *s, size_t i,
                         const unsigned char *idx, size_t idx_len,
                         uint64_t tar_xxh3);

#endif /* TFS_PACK_WRITE_INT_H */
