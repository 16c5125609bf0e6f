/* SPDX-License-Identifier: MIT */
/*
 * The registry: every section of metrics, in the order the control file
 * shows them.  Each module defines its own section next to its snapshot
 * struct (metrics.h lists where); this list is what the unit test walks,
 * so a section missing here is a section no test checks.  Kept out of
 * metrics.c so that only what walks the registry links every module.
 */
#include "metrics/metrics.h"

const struct tfs_metric_section *const tfs_metric_registry[] = {
    &tfs_metrics_cache, &tfs_metrics_fuse, &tfs_metrics_hints,
    &tfs_metrics_store,
    &tfs_metrics_endpoint, &tfs_metrics_wb, &tfs_metrics_fault,
    &tfs_metrics_retry, &tfs_metrics_group, &tfs_metrics_peers,
    &tfs_metrics_shared,
};

const size_t tfs_metric_registry_len = TFS_ARRAY_LEN(tfs_metric_registry);
