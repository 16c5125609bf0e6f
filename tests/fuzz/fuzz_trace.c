/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the access-trace parser (tfs_trace_parse), in
 * both modes (a cut-off last record refused or ignored).  Invariant:
 * no crash, and every event has a known type and a key within bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tierfs/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int check_event(void *arg, const struct tfs_trace_event *ev)
{
    (void)arg;
    if (ev->type < 1 || ev->type > 3)
        abort();
    if (ev->type == 1 && (ev->key == NULL || strlen(ev->key) > 1024))
        abort();
    if (ev->type == 2 && ev->src > 3)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)tfs_trace_parse(data, size, false, check_event, NULL);
    (void)tfs_trace_parse(data, size, true, check_event, NULL);
    return 0;
}
