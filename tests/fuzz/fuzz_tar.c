/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the tar header parser (src/pack/tar.c): the input
 * is walked as an archive, member by member.  Invariants: no crash, no
 * read outside the input (ASan), a parsed member's header length within
 * what was given and its name a C string of at most TFS_TAR_NAME_MAX
 * bytes; a parsed regular member re-encodes and parses back to the same
 * name and size.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pack/pack_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_reencode(const struct tfs_tar_member *m)
{
    static unsigned char buf[TFS_TAR_HDR_MAX];
    static struct tfs_tar_member back;
    size_t len = 0;

    if (m->name[0] == '\0' ||
        tfs_tar_encode(m->name, m->size, m->mtime_s, buf, sizeof(buf),
                       &len) != 0)
        return;
    if (tfs_tar_parse(buf, len, &back) != 0 || back.size != m->size ||
        strcmp(back.name, m->name) != 0 || back.hdr_len != len)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct tfs_tar_member m;
    size_t off = 0;

    while (off < size) {
        int rc = tfs_tar_parse(data + off, size - off, &m);

        if (rc == -ENODATA) {
            off += TFS_TAR_BLOCK;
            continue;
        }
        if (rc == -ENOBUFS && (m.hdr_len <= size - off ||
                               m.hdr_len > TFS_TAR_HDR_MAX))
            abort();
        if (rc != 0)
            break;
        if (m.hdr_len > size - off || m.hdr_len % TFS_TAR_BLOCK != 0 ||
            strlen(m.name) > TFS_TAR_NAME_MAX)
            abort();
        fuzz_reencode(&m);
        if (m.size > size)
            break;
        off += m.hdr_len + (size_t)pack_round512(m.size);
    }
    return 0;
}
