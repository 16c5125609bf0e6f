/* SPDX-License-Identifier: MIT */
/* Placeholder: being written. */
#include <errno.h>
#include "store/store_int.h"

static int retry_open(struct tfs_store *st, const char *location)
{
    (void)st;
    (void)location;
    return tfs_err(-ENOTSUP, "the retry store is not built yet");
}

static void retry_close(struct tfs_store *st)
{
    (void)st;
}

const struct tfs_store_ops tfs_retry_ops = {
    .version = TFS_STORE_OPS_VERSION,
    .scheme = "retry",
    .caps = TFS_SCAP_WRAPPER,
    .open = retry_open,
    .close = retry_close,
};
