/* SPDX-License-Identifier: MIT */
/* Placeholder: being written. */
#include <errno.h>
#include "store/store_int.h"

static int s3_open(struct tfs_store *st, const char *location)
{
    (void)st;
    (void)location;
    return tfs_err(-ENOTSUP, "the s3 store is not built yet");
}

static void s3_close(struct tfs_store *st)
{
    (void)st;
}

const struct tfs_store_ops tfs_s3_ops = {
    .version = TFS_STORE_OPS_VERSION,
    .scheme = "s3",
    .caps = 0,
    .open = s3_open,
    .close = s3_close,
};
