/* SPDX-License-Identifier: MIT */
/*
 * nullfs: the floor of a FUSE metadata benchmark (bench/meta-million,
 * docs/performance-meta.md).  A libfuse low-level file system with the
 * tree of bench/meta-million (N files of 16 bytes, file i named
 * pNNN/oNNNNNNN in prefix i % P) that answers LOOKUP, GETATTR and
 * READDIR from a table in memory and does nothing else: no store, no
 * cache, no lock, no allocation per request.  Its stat rate after
 * drop_caches is what the kernel's FUSE path and libfuse allow on this
 * machine; tierfs cannot beat it.
 *
 *   nullfs [-f] [-t MAX_THREADS] [-T TTL_S] N P MNT
 *
 * It negotiates as tierfs does (src/fuse/session.c: async reads,
 * parallel directory operations, the same mount options), runs libfuse's
 * multi-threaded loop with MAX_THREADS (default 64, tierfs's) and
 * answers with TTL_S entry and attribute timeouts (default 3600, those
 * of an --immutable tierfs mount).  Without -f it forks and returns once
 * mounted (as `tierfs mount` does); it ends on unmount.
 *
 * The table: node id 1 is the root, 2 + j prefix j, 2 + P + i file i;
 * a name is looked up by its number, then checked to be that entry's
 * name exactly, so "p7" or "o1" do not resolve.
 *
 * With -s SIZE every file has SIZE bytes and READ answers from one
 * static 1 MiB buffer (a pattern, the same for every file): the floor of
 * a FUSE read benchmark (bench/cold-read), what the kernel's FUSE read
 * path and libfuse cost a daemon that has the bytes at hand.  -r KIB
 * raises the mount's kernel readahead through sysfs, as tierfs does
 * (src/fuse/session.c; tierfs's default 4096).
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct nf {
    unsigned long n;                    /* files */
    unsigned long p;                    /* prefixes */
    double        ttl;                  /* entry and attr timeouts, s */
    uint64_t      size;                 /* bytes of every file (-s) */
    unsigned      ra_kib;               /* kernel readahead (-r), 0: as is */
    const char   *mnt;
    uid_t         uid;
    gid_t         gid;
    time_t        mtime;
};

#define NF_MIN(a, b) ((a) < (b) ? (a) : (b))

static struct nf nf;
static char nf_data[1 << 20];           /* what every READ answers from */

static fuse_ino_t nf_dir_ino(unsigned long j)
{
    return 2 + j;
}

static fuse_ino_t nf_file_ino(unsigned long i)
{
    return 2 + nf.p + i;
}

/* The attributes of node id ino; false when there is none. */
static bool nf_attr(fuse_ino_t ino, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    if (ino == 0 || ino >= nf_file_ino(nf.n))
        return false;
    st->st_ino = ino;
    st->st_uid = nf.uid;
    st->st_gid = nf.gid;
    st->st_blksize = 1 << 20;
    st->st_mtim.tv_sec = nf.mtime;
    st->st_atim = st->st_ctim = st->st_mtim;
    if (ino < nf_file_ino(0)) {
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2;
    } else {
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)nf.size;
        st->st_blocks = (blkcnt_t)((nf.size + 511) / 512);
    }
    return true;
}

/* The number in name after its letter, if name is exactly what fmt
   prints for it (and below lim); else -1. */
static long nf_parse(const char *name, const char *fmt, unsigned long lim)
{
    char buf[32];
    char *end;
    unsigned long v;

    if (name[0] != fmt[0] || name[1] < '0' || name[1] > '9')
        return -1;
    v = strtoul(name + 1, &end, 10);
    if (*end != '\0' || v >= lim)
        return -1;
    snprintf(buf, sizeof(buf), fmt, v);
    return strcmp(buf, name) == 0 ? (long)v : -1;
}

static void nf_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fuse_entry_param e;
    fuse_ino_t ino = 0;
    long v;

    memset(&e, 0, sizeof(e));
    if (parent == FUSE_ROOT_ID) {
        v = nf_parse(name, "p%03lu", nf.p);
        if (v >= 0)
            ino = nf_dir_ino((unsigned long)v);
    } else if (parent >= nf_dir_ino(0) && parent < nf_file_ino(0)) {
        v = nf_parse(name, "o%07lu", nf.n);
        if (v >= 0 && (unsigned long)v % nf.p == parent - nf_dir_ino(0))
            ino = nf_file_ino((unsigned long)v);
    } else {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    e.ino = ino;                        /* 0: a negative entry */
    e.attr_timeout = e.entry_timeout = nf.ttl;
    if (ino != 0)
        nf_attr(ino, &e.attr);
    fuse_reply_entry(req, &e);
}

static void nf_getattr(fuse_req_t req, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    struct stat st;

    (void)fi;
    if (!nf_attr(ino, &st))
        fuse_reply_err(req, ENOENT);
    else
        fuse_reply_attr(req, &st, nf.ttl);
}

static void nf_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    (void)ino;
    (void)nlookup;
    fuse_reply_none(req);
}

static void nf_forget_multi(fuse_req_t req, size_t count,
                            struct fuse_forget_data *forgets)
{
    (void)count;
    (void)forgets;
    fuse_reply_none(req);
}

/* Entry k of directory ino (k from 0), as a name and node id; false
   past the end. */
static bool nf_dirent(fuse_ino_t ino, unsigned long k, char *name,
                      size_t size, fuse_ino_t *child)
{
    unsigned long i;

    if (ino == FUSE_ROOT_ID) {
        if (k >= nf.p)
            return false;
        snprintf(name, size, "p%03lu", k);
        *child = nf_dir_ino(k);
        return true;
    }
    i = (ino - nf_dir_ino(0)) + k * nf.p;
    if (i >= nf.n)
        return false;
    snprintf(name, size, "o%07lu", i);
    *child = nf_file_ino(i);
    return true;
}

static void nf_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                       off_t off, struct fuse_file_info *fi)
{
    char *buf;
    char name[32];
    size_t len = 0;
    fuse_ino_t child;
    struct stat st;

    (void)fi;
    if (ino != FUSE_ROOT_ID && (ino < nf_dir_ino(0) || ino >= nf_file_ino(0))) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    buf = malloc(size);
    if (buf == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    for (unsigned long k = (unsigned long)off;
         nf_dirent(ino, k, name, sizeof(name), &child); k++) {
        size_t n;

        memset(&st, 0, sizeof(st));
        st.st_ino = child;
        st.st_mode = child < nf_file_ino(0) ? S_IFDIR : S_IFREG;
        n = fuse_add_direntry(req, buf + len, size - len, name, &st,
                              (off_t)k + 1);
        if (n > size - len)
            break;
        len += n;
    }
    fuse_reply_buf(req, buf, len);
    free(buf);
}

static void nf_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
    uint64_t end;

    (void)fi;
    if (ino < nf_file_ino(0) || ino >= nf_file_ino(nf.n)) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    end = NF_MIN((uint64_t)off + size, nf.size);
    size = (uint64_t)off < end ? (size_t)(end - (uint64_t)off) : 0;
    bv.buf[0].mem = nf_data;
    bv.buf[0].size = NF_MIN(size, sizeof(nf_data));
    fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
}

/* The mount's kernel readahead to -r KiB (the bdi of its device). */
static void nf_readahead(struct fuse_conn_info *conn)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    char mnt[4096];
    char dev[32];
    char path[96];
    bool found = false;

    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "%*s %*s %31s %*s %4095s", dev, mnt) == 2 &&
            strcmp(mnt, nf.mnt) == 0) {
            found = true;
            break;
        }
    if (f != NULL)
        fclose(f);
    snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
    f = found ? fopen(path, "we") : NULL;
    if (f == NULL || fprintf(f, "%u", nf.ra_kib) < 0) {
        fprintf(stderr, "nullfs: cannot set %s\n", found ? path : nf.mnt);
    } else {
        conn->max_readahead = nf.ra_kib << 10;
    }
    if (f != NULL)
        fclose(f);
}

static void nf_init(void *userdata, struct fuse_conn_info *conn)
{
    (void)userdata;
    if (nf.ra_kib > 0)
        nf_readahead(conn);
    conn->time_gran = 1;
    if (conn->capable & FUSE_CAP_ASYNC_READ)
        conn->want |= FUSE_CAP_ASYNC_READ;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
        conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
}

static const struct fuse_lowlevel_ops nf_ops = {
    .init = nf_init,
    .lookup = nf_lookup,
    .forget = nf_forget,
    .forget_multi = nf_forget_multi,
    .getattr = nf_getattr,
    .readdir = nf_readdir,
    .read = nf_read,
};

static int nf_usage(void)
{
    fprintf(stderr, "usage: nullfs [-f] [-t MAX_THREADS] [-T TTL_S] "
            "[-s SIZE] [-r KIB] N P MNT\n");
    return 2;
}

int main(int argc, char **argv)
{
    char *fargv[] = {"nullfs", "-o",
                     "ro,default_permissions,fsname=nullfs,subtype=nullfs",
                     NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
    struct fuse_loop_config *cfg;
    struct fuse_session *se;
    unsigned long threads = 64;
    bool fg = false;
    int opt;
    int rc;

    nf.ttl = 3600;
    nf.size = 16;
    for (size_t i = 0; i < sizeof(nf_data); i++)
        nf_data[i] = (char)(i * 131 + 7);
    while ((opt = getopt(argc, argv, "ft:T:s:r:")) != -1) {
        if (opt == 'f')
            fg = true;
        else if (opt == 't')
            threads = strtoul(optarg, NULL, 10);
        else if (opt == 'T')
            nf.ttl = strtod(optarg, NULL);
        else if (opt == 's')
            nf.size = strtoull(optarg, NULL, 10);
        else if (opt == 'r')
            nf.ra_kib = (unsigned)strtoul(optarg, NULL, 10);
        else
            return nf_usage();
    }
    if (argc - optind != 3)
        return nf_usage();
    nf.n = strtoul(argv[optind], NULL, 10);
    nf.p = strtoul(argv[optind + 1], NULL, 10);
    if (nf.p == 0 || nf.p > 1000 || nf.n > 10000000 || threads == 0)
        return nf_usage();
    nf.mnt = realpath(argv[optind + 2], NULL);
    if (nf.mnt == NULL)
        return nf_usage();
    nf.uid = getuid();
    nf.gid = getgid();
    nf.mtime = time(NULL);
    se = fuse_session_new(&args, &nf_ops, sizeof(nf_ops), NULL);
    if (se == NULL)
        return 1;
    if (fuse_session_mount(se, argv[optind + 2]) != 0) {
        fuse_session_destroy(se);
        return 1;
    }
    if (fuse_daemonize(fg) != 0)
        return 1;
    cfg = fuse_loop_cfg_create();
    if (cfg == NULL)
        return 1;
    fuse_loop_cfg_set_max_threads(cfg, (unsigned)threads);
    rc = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
    fuse_session_unmount(se);
    fuse_session_destroy(se);
    return rc == 0 ? 0 : 1;
}
