/* SPDX-License-Identifier: MIT */
/* Version queries (tierfs.h), for bindings that check what they loaded. */
#include "tierfs/tierfs.h"

int tfs_abi_version(void)
{
    return TFS_ABI_VERSION;
}

const char *tfs_version(void)
{
    return TFS_VERSION_STRING;
}
