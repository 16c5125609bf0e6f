/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the s3 store's response parsers: every input goes
 * to the ListObjectsV2, Error and one-element result parsers (all four
 * roots) and, NUL-terminated, to the two date parsers.  Anything but a
 * clean return or an error code (a crash, a leak, an out-of-bounds read,
 * a page that breaks its own invariants) is a bug.
 *
 *     clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE \
 *         -I include -I src tests/fuzz/fuzz_s3_xml.c src/store/s3_xml.c \
 *         src/store/store.c src/common/\*.c ... -lexpat
 *     ./fuzz_s3_xml tests/fuzz/corpus/s3_xml
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/s3_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A page must hold what its counts say, each key NUL-terminated. */
static void fuzz_check_page(const struct tfs_list_page *pg)
{
    size_t sum = 0;

    for (size_t i = 0; i < pg->n_entries; i++)
        sum += strlen(pg->entries[i].key) + pg->entries[i].st.version[0];
    for (size_t i = 0; i < pg->n_prefixes; i++)
        sum += strlen(pg->prefixes[i]);
    if (pg->next_token != NULL)
        sum += strlen(pg->next_token);
    if (sum == SIZE_MAX)
        abort();                        /* keeps the reads above */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const roots[] = {
        "InitiateMultipartUploadResult", "CompleteMultipartUploadResult",
        "CopyObjectResult", "CopyPartResult",
    };
    const char *body = (const char *)data;
    struct tfs_list_page pg;
    struct s3_error err;
    struct s3_result res;
    char *str;
    int64_t t;

    if (tfs_s3_xml_parse_list(body, size, "", &pg) == 0) {
        fuzz_check_page(&pg);
        tfs_list_page_cleanup(&pg);
    }
    if (tfs_s3_xml_parse_list(body, size, "p/", &pg) == 0) {
        fuzz_check_page(&pg);
        tfs_list_page_cleanup(&pg);
    }
    tfs_s3_xml_parse_error(body, size, &err);
    for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++)
        tfs_s3_xml_parse_result(body, size, roots[i], &res);
    str = malloc(size + 1);
    if (str == NULL)
        return 0;
    memcpy(str, data, size);
    str[size] = '\0';
    tfs_s3_parse_iso8601(str, &t);
    tfs_s3_parse_http_date(str, &t);
    free(str);
    return 0;
}
