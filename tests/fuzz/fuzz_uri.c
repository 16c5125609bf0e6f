/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the URI and option parsers: tfs_uri_parse,
 * tfs_opts_parse (and every typed option parser over the values) and
 * percent-decoding.  Invariants checked: no crash, no leak, and parsed
 * pieces are consistent with the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_values(struct tfs_opts *o)
{
    for (size_t i = 0; i < o->n; i++) {
        uint64_t u;
        double d;
        bool b;

        (void)tfs_parse_size(o->v[i].value, &u);
        (void)tfs_parse_u64(o->v[i].value, &u);
        (void)tfs_parse_double(o->v[i].value, &d);
        (void)tfs_parse_bool(o->v[i].value, &b);
        if (tfs_opts_take(o, o->v[i].name) != o->v[i].value)
            abort();
    }
    if (tfs_opts_unused(o) != NULL)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    struct tfs_uri u;
    struct tfs_opts o = {0};

    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (tfs_uri_parse(s, &u) == 0) {
        if (u.n_schemes < 1 || u.n_schemes > TFS_URI_MAX_LAYERS ||
            u.location == NULL)
            abort();
        if (tfs_opts_parse(&o, u.query) == 0)
            fuzz_values(&o);
        tfs_opts_cleanup(&o);
        tfs_uri_cleanup(&u);
    }
    if (tfs_opts_parse(&o, s) == 0)
        fuzz_values(&o);
    tfs_opts_cleanup(&o);
    if (tfs_pct_decode(s) == 0 && strlen(s) > size)
        abort();
    free(s);
    return 0;
}
