/* SPDX-License-Identifier: MIT */
/*
 * libtierfs: a node-local cache in front of S3-compatible object stores
 * and POSIX shared file systems, for training jobs.  This umbrella header
 * pulls in the whole public API; each part is documented in its own
 * header:
 *
 *   err.h     the error space (0, -errno, TFS_E*) and tfs_strerror
 *   log.h     the log sink
 *   mem.h     allocation hooks
 *   store.h   the store layer: posix, s3 and the wrappers
 *   fault.h   the fault-injecting wrapper (tests, demos)
 *   retry.h   the retry/timeout wrapper
 *   cache.h   the RAM + disk block cache and its fetch engine
 *   trace.h   access traces: the format, its writer and parser
 *   fs.h      the FUSE mount
 *   pack.h    packed (WebDataset tar) datasets: the reader
 *   ckpt.h    checkpoints: per-rank writers, the commit, lazy readers
 */
#ifndef TIERFS_TIERFS_H
#define TIERFS_TIERFS_H

#include "tierfs/api.h"
#include "tierfs/cache.h"
#include "tierfs/ckpt.h"
#include "tierfs/err.h"
#include "tierfs/fault.h"
#include "tierfs/fs.h"
#include "tierfs/log.h"
#include "tierfs/mem.h"
#include "tierfs/pack.h"
#include "tierfs/retry.h"
#include "tierfs/store.h"
#include "tierfs/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TFS_ABI_VERSION of the library actually loaded. */
TFS_API int tfs_abi_version(void);
/* "0.1.0" */
TFS_API const char *tfs_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_TIERFS_H */
