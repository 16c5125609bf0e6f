/* SPDX-License-Identifier: MIT */
/* Placeholder: being written. */
#include <errno.h>
#include "store/store_int.h"

static int fault_open(struct tfs_store *st, const char *location)
{
    (void)st;
    (void)location;
    return tfs_err(-ENOTSUP, "the fault store is not built yet");
}

static void fault_close(struct tfs_store *st)
{
    (void)st;
}

const struct tfs_store_ops tfs_fault_ops = {
    .version = TFS_STORE_OPS_VERSION,
    .scheme = "fault",
    .caps = TFS_SCAP_WRAPPER,
    .open = fault_open,
    .close = fault_close,
};
