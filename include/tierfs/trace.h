/* SPDX-License-Identifier: MIT */
/*
 * Access traces: a compact binary log of what readers did (open, read,
 * close: time, file, offset, length, where the bytes came from, latency),
 * cheap enough to leave on.  (`tierfs profile` analyses them; the
 * analysis belongs to the command-line tool, not to the library.)
 *
 * A cache records a trace when its "trace" option names a file (the
 * mount's --trace FILE).  Format (little-endian, field by field):
 *
 *   header  "TFSTRC1\n", u64 start time (ns since the epoch)
 *   open    u8 1, u32 file, u64 t_ns, u64 size, u16 key length, key
 *   read    u8 2, u32 file, u64 t_ns, u64 offset, u32 length,
 *           u32 latency_us, u8 source (0 RAM, 1 disk, 2 store, 3 mixed)
 *   close   u8 3, u32 file, u64 t_ns
 *
 * t_ns counts from the start time; file numbers are per trace.
 */
#ifndef TIERFS_TRACE_H
#define TIERFS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tierfs/api.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tfs_trace_src {
    TFS_TRACE_RAM   = 0,
    TFS_TRACE_DISK  = 1,
    TFS_TRACE_STORE = 2,
    TFS_TRACE_MIXED = 3,
};

struct tfs_trace;

/* Create (truncate) a trace file.  Thread-safe writes after that. */
TFS_API int tfs_trace_open(struct tfs_trace **out, const char *path);
/* Flush and close; NULL is a no-op. */
TFS_API void tfs_trace_close(struct tfs_trace *t);
/* Record events; errors are counted, never returned (tracing must not
 * fail a read).  tfs_trace_file_open returns the file's number. */
TFS_API uint32_t tfs_trace_file_open(struct tfs_trace *t, const char *key,
                                     uint64_t size);
TFS_API void tfs_trace_read(struct tfs_trace *t, uint32_t file, uint64_t off,
                            uint32_t len, uint32_t latency_us, int src);
TFS_API void tfs_trace_file_close(struct tfs_trace *t, uint32_t file);

/* One event of a parsed trace. */
struct tfs_trace_event {
    int         type;                   /* 1 open, 2 read, 3 close */
    uint32_t    file;
    uint64_t    t_ns;
    uint64_t    size;                   /* open */
    const char *key;                    /* open; valid during the call */
    uint64_t    off;                    /* read */
    uint32_t    len;                    /* read */
    uint32_t    latency_us;             /* read */
    int         src;                    /* read */
};

typedef int tfs_trace_fn(void *arg, const struct tfs_trace_event *ev);

/*
 * Parse a trace held in memory, calling fn per event (a non-zero return
 * stops and is returned).  TFS_EFORMAT (with the offset in the detail)
 * on a malformed or truncated record; a record cut off by a crash at the
 * very end is ignored only when allow_tail.
 */
TFS_API int tfs_trace_parse(const void *buf, size_t len, bool allow_tail,
                            tfs_trace_fn *fn, void *arg);

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_TRACE_H */
