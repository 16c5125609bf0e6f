/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the S3 layer's own response-head parser
 * (tfs_s3_head_parse, s3_http.c: the plain-HTTP GETs).  Every input is
 * parsed whole and at every cut a reader could see (a head arriving in
 * pieces): the answer must be 0 (more needed) for a proper prefix of a
 * head that parses, never a success past the bytes given, and the
 * fields must hold what the parser promises.  Anything else (a crash, an
 * out-of-bounds read, a broken promise) is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/s3_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fuzz_parse(const uint8_t *data, size_t n, struct s3_head *h,
                      struct s3_resp *r)
{
    char *copy = malloc(n > 0 ? n : 1); /* exact size: ASan sees overruns */
    int rc;

    if (copy == NULL)
        return -1;
    memcpy(copy, data, n);
    memset(r, 0, sizeof(*r));
    rc = tfs_s3_head_parse(copy, n, r, h);
    if (rc == 1 && (h->len > n || h->len < 4 ||
                    memcmp(copy + h->len - 4, "\r\n\r\n", 4) != 0 ||
                    r->status < 100 || r->status > 999 ||
                    strnlen(r->etag, sizeof(r->etag)) == sizeof(r->etag)))
        abort();
    free(copy);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct s3_head h;
    struct s3_resp r;
    int whole = fuzz_parse(data, size, &h, &r);
    size_t len = h.len;

    if (whole != 1)
        return 0;
    /* every cut before the head's end needs more bytes, or fails as the
       whole does not (a bad line is bad in any prefix holding it) */
    for (size_t cut = 0; cut < len; cut += 1 + cut / 8) {
        int rc = fuzz_parse(data, cut, &h, &r);

        if (rc == 1)
            abort();
    }
    return 0;
}
