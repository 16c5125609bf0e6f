/* SPDX-License-Identifier: MIT */
/*
 * keepw: what keeping a cold read's bytes on local disk costs, without
 * the read (bench/cold-read's "keeping" bound, docs/performance-cold.md).
 *
 *   keepw DIR SIZE
 *
 * Writes SIZE bytes into new files of one 4 MiB block each under DIR
 * (created; it must not exist), the way tierfs's disk tier writes a
 * block it fetched (src/cache/disk.c): the block's chunk sums (XXH3 of
 * each 64 KiB, src/common/csum.c, the same code), a header page holding
 * them through the page cache, the data with O_DIRECT, the file written
 * out and dropped from the page cache (sync_file_range,
 * POSIX_FADV_DONTNEED), closed and renamed into place.  The data is one
 * buffer of random bytes written again for every block: the bytes a
 * fetch hashes have just landed, in the CPU's cache, as these are.
 *
 * Exit 0 when every block is on disk; else a one-line error, exit 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/csum.h"

#define BLOCK (4u << 20)
#define PAGE 4096u

static int fail(const char *what, const char *path)
{
    fprintf(stderr, "keepw: %s %s: %s\n", what, path, strerror(errno));
    return 1;
}

static int set_direct(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0)
        return -1;
    return fcntl(fd, F_SETFL, on ? fl | O_DIRECT : fl & ~O_DIRECT);
}

static int put_all(int fd, const void *p, size_t len, off_t off)
{
    const char *c = p;

    while (len > 0) {
        ssize_t n = pwrite(fd, c, len, off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        c += n;
        len -= (size_t)n;
        off += n;
    }
    return 0;
}

int main(int argc, char **argv)
{
    char tmp[4200], name[4200];
    uint8_t *data, *head;
    unsigned long long size;
    char *end;
    int fd;

    if (argc != 3) {
        fprintf(stderr, "usage: keepw DIR SIZE\n");
        return 2;
    }
    errno = 0;
    size = strtoull(argv[2], &end, 10);
    if (errno != 0 || *end != '\0' || size == 0) {
        fprintf(stderr, "keepw: bad SIZE '%s'\n", argv[2]);
        return 2;
    }
    if (mkdir(argv[1], 0700) != 0)
        return fail("cannot create", argv[1]);
    if (posix_memalign((void **)&data, PAGE, BLOCK) != 0 ||
        posix_memalign((void **)&head, PAGE, PAGE) != 0) {
        fprintf(stderr, "keepw: out of memory\n");
        return 1;
    }
    fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || read(fd, data, BLOCK) != (ssize_t)BLOCK)
        return fail("cannot read", "/dev/urandom");
    close(fd);

    for (unsigned long long at = 0; at < size; at += BLOCK) {
        size_t len = size - at < BLOCK ? (size_t)(size - at) : BLOCK;
        size_t dlen = (len + PAGE - 1) / PAGE * PAGE;
        struct tfs_csum cs;
        uint64_t digest;

        if (tfs_csum_begin(&cs, len) != 0) {
            fprintf(stderr, "keepw: out of memory\n");
            return 1;
        }
        for (size_t p = 0; p < len; p += TFS_CSUM_CHUNK)   /* as it lands */
            tfs_csum_feed(&cs, data, p + TFS_CSUM_CHUNK < len
                                         ? p + TFS_CSUM_CHUNK : len);
        digest = tfs_csum_end(&cs, data);
        memset(head, 0, PAGE);
        memcpy(head, &digest, sizeof(digest));
        memcpy(head + 8, cs.sums, (len + TFS_CSUM_CHUNK - 1) /
                                      TFS_CSUM_CHUNK * 8);
        tfs_csum_cleanup(&cs);

        snprintf(tmp, sizeof(tmp), "%s/.tmp-%llu", argv[1], at);
        snprintf(name, sizeof(name), "%s/b%llu", argv[1], at);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
            return fail("cannot create", tmp);
        if (set_direct(fd, 1) != 0 || put_all(fd, data, dlen, PAGE) != 0 ||
            set_direct(fd, 0) != 0 || put_all(fd, head, PAGE, 0) != 0)
            return fail("cannot write", tmp);
        if (sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE |
                                      SYNC_FILE_RANGE_WAIT_AFTER) == 0)
            (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        if (close(fd) != 0 || rename(tmp, name) != 0)
            return fail("cannot finish", name);
    }
    free(data);
    free(head);
    return 0;
}
