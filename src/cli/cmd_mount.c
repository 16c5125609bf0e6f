/* SPDX-License-Identifier: MIT */
/*
 * tierfs mount URI MOUNTPOINT [options]: serve a store through FUSE with
 * the cache in front, writable with write-back unless --read-only (fs.h,
 * docs/fuse.md, docs/writeback.md).
 *
 * Without -f it daemonises, but the child does the whole setup (store,
 * cache, metrics, mount) while the parent waits on a pipe: every setup
 * error still reaches the terminal and the exit status, and the parent
 * returns 0 only once the file system is mounted.  Forking first also
 * means the cache's threads are born in the process that keeps them.
 * Once detached, the daemon logs to syslog, or to --log FILE.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"
#include "tierfs/fs.h"
#include "tierfs/log.h"

#define MOUNT_MAX_SETTINGS 64

/* Long options that map one to one onto an fs/cache setting. */
static const struct {
    const char *opt;
    const char *name;
} mount_map[] = {
    {"cache-dir", "cache_dir"},     {"cache-size", "cache_size"},
    {"mem-cache", "mem_cache"},     {"block-size", "block_size"},
    {"eviction", "eviction"},       {"meta-ttl", "meta_ttl"},
    {"max-inflight", "max_inflight"}, {"max-readahead", "max_readahead"},
    {"free-space", "free_space"},   {"metrics", "metrics"},
    {"threads", "max_threads"},     {"trace", "trace"},
    {"staging-dir", "staging_dir"}, {"staging-max", "staging_max"},
    {"upload-bw", "upload_bw"},     {"upload-jobs", "upload_jobs"},
    {"upload-delay", "upload_delay"}, {"cache-mode", "cache_mode"},
    {"group", "group"},             {"group-listen", "group_listen"},
    {"group-secret-file", "group_secret_file"},
    {"group-serve", "group_serve"}, {"group-timeout", "group_timeout_ms"},
    {"group-inflight", "group_inflight"}, {"shared-tier", "shared_tier"},
    {"group-tls-ca", "group_tls_ca"}, {"group-tls-cert", "group_tls_cert"},
    {"group-tls-key", "group_tls_key"},
    {"group-ckpt-dir", "group_ckpt_dir"},
    {"group-ckpt-max", "group_ckpt_max"},
    {"group-ckpt-keep", "group_ckpt_keep"},
    {"manifest", "manifest"},
};

struct mount_args {
    const char *names[MOUNT_MAX_SETTINGS];   /* setting names */
    char       *values[MOUNT_MAX_SETTINGS];  /* owned */
    size_t      n;
    bool        foreground;
    bool        debug;
    char       *log_path;                    /* owned; NULL: syslog */
};

static void mount_help(FILE *f)
{
    fprintf(f,
        "usage: tierfs mount [options] URI MOUNTPOINT\n\n"
        "Serve the objects under URI at MOUNTPOINT (an empty directory),\n"
        "through a RAM + disk cache.  Writes go to a staging area on local\n"
        "disk (close() returns once they are durable there) and upload in\n"
        "the background; 'tierfs sync MOUNTPOINT' waits for them.  Runs in\n"
        "the background unless -f; 'tierfs umount MOUNTPOINT' or SIGTERM\n"
        "unmounts.\n\n"
        "  --cache-dir DIR       disk tier (default: RAM only)\n"
        "  --cache-size SIZE     bytes of the disk tier (default 10G)\n"
        "  --cache-mode MODE     private (default: 0700/0600) or group\n"
        "                        (2770/0660: shared with the dir's group,\n"
        "                        who can also poison it; docs/security.md)\n"
        "  --mem-cache SIZE      bytes of the RAM tier (default 1G)\n"
        "  --block-size SIZE     cache block size (default 4M)\n"
        "  --eviction POLICY     tinylfu (default) or lru\n"
        "  --free-space N|P%%     keep this much free on the cache disk\n"
        "  --immutable           the data never changes: cache metadata\n"
        "                        and pages for good\n"
        "  --manifest FILE       the listing comes from FILE ('tierfs\n"
        "                        manifest URI > FILE'), never from the\n"
        "                        store; implies --immutable\n"
        "  --meta-ttl SECONDS    trust stats and listings this long "
        "(default 5)\n"
        "  --max-inflight N      concurrent store reads (default 32)\n"
        "  --max-readahead SIZE  largest readahead window (default 64M)\n"
        "  --metrics ADDR:PORT   Prometheus endpoint, e.g. "
        "127.0.0.1:9567\n"
        "  --threads N           most FUSE request threads (default 64)\n"
        "  --trace FILE          record an access trace (tierfs profile)\n"
        "  --read-only           no writes (EROFS); no staging dir\n"
        "  --staging-dir DIR     staged writes and their journal (default\n"
        "                        CACHE_DIR/staging/ID, or\n"
        "                        /var/tmp/tierfs-UID/staging/ID)\n"
        "  --staging-max SIZE    staged bytes before writers wait for\n"
        "                        uploads (default 100G)\n"
        "  --upload-bw SIZE      upload bandwidth cap per second (default\n"
        "                        none)\n"
        "  --upload-jobs N       uploads at once (default 4)\n"
        "  --upload-delay S      seconds after a close before uploading, so\n"
        "                        write-then-rename uploads once (default 1)\n"
        "  --group FILE          join the cache group listed in FILE\n"
        "                        (host:port [weight] lines; docs/group.md),\n"
        "                        or dns:NAME:PORT (every address of NAME)\n"
        "  --group-listen HOST:PORT  serve peers here: this node's line\n"
        "                        in FILE (never 0.0.0.0 unless given)\n"
        "  --group-secret-file F the group's secret (mode 0600)\n"
        "  --group-serve on|off  off: a client only, not in FILE\n"
        "  --group-timeout MS    one peer request (default 3000)\n"
        "  --group-inflight N    requests at once per peer (default 16)\n"
        "  --group-tls-ca F      peers over TLS, checked against this CA\n"
        "  --group-tls-cert F    this node's certificate (PEM; IP SANs\n"
        "  --group-tls-key F     for IP members) and key (0600)\n"
        "  --group-ckpt-dir DIR  keep peers' checkpoint copies here, when\n"
        "                        serving (default CACHE_DIR/ckpt-peer; none\n"
        "                        without --cache-dir)\n"
        "  --group-ckpt-max SIZE at most this much of them (default 64G;\n"
        "                        0: keep none)\n"
        "  --group-ckpt-keep N   newest steps kept per job (default 2)\n"
        "  --shared-tier URI     a shared cache tier on a fast store\n"
        "                        (s3://cache-bucket/prefix): read there\n"
        "                        before the store, written back after\n"
        "  --set NAME=VALUE      any cache option (see docs/fuse.md)\n"
        "  -o OPTS               FUSE mount options (allow_other, ...)\n"
        "  --log FILE            daemon log (default: syslog)\n"
        "  -f, --foreground      stay in the foreground, log to stderr\n"
        "  -d, --debug           -f plus libfuse's request trace\n");
}

/* path made absolute against the current directory (tfs_malloc'd). */
static char *mount_abs(const char *path)
{
    char cwd[PATH_MAX];
    struct tfs_buf b;

    tfs_buf_init(&b, 0);
    if (path[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL)
        tfs_buf_puts(&b, path);
    else
        tfs_buf_printf(&b, "%s/%s", cwd, path);
    return tfs_buf_steal(&b);
}

static int mount_add(struct mount_args *a, const char *name,
                     const char *value)
{
    if (a->n == MOUNT_MAX_SETTINGS)
        return cli_usage_error("mount", "too many options");
    a->values[a->n] = strcmp(name, "cache_dir") == 0 ||
                              strcmp(name, "trace") == 0 ||
                              strcmp(name, "staging_dir") == 0 ||
                              (strcmp(name, "group") == 0 &&
                               strncmp(value, "dns:", 4) != 0) ||
                              strcmp(name, "group_secret_file") == 0 ||
                              strcmp(name, "group_ckpt_dir") == 0 ||
                              strcmp(name, "manifest") == 0 ||
                              strncmp(name, "group_tls_", 10) == 0
                          ? mount_abs(value)
                          : tfs_strdup(value);
    if (a->values[a->n] == NULL)
        return CLI_FAIL;
    a->names[a->n++] = name;
    return 0;
}

/* --set NAME=VALUE: the name points into arg (argv lives long enough). */
static int mount_add_set(struct mount_args *a, char *arg)
{
    char *eq = strchr(arg, '=');

    if (eq == NULL || eq == arg)
        return cli_usage_error("mount", "--set wants NAME=VALUE, not '%s'",
                               arg);
    *eq = '\0';
    return mount_add(a, arg, eq + 1);
}

static void mount_args_cleanup(struct mount_args *a)
{
    for (size_t i = 0; i < a->n; i++)
        tfs_free(a->values[i]);
    tfs_free(a->log_path);
}

enum {
    MOUNT_OPT_IMMUTABLE = 1000,
    MOUNT_OPT_READ_ONLY,
    MOUNT_OPT_SET,
    MOUNT_OPT_LOG,
    MOUNT_OPT_MAP,                      /* + index into mount_map */
};

/* One option from getopt_long; 0, or an exit status (-1: --help). */
static int mount_opt(struct mount_args *a, int c)
{
    if (c >= MOUNT_OPT_MAP)
        return mount_add(a, mount_map[c - MOUNT_OPT_MAP].name, optarg);
    switch (c) {
    case MOUNT_OPT_IMMUTABLE:
        return mount_add(a, "immutable", "1");
    case MOUNT_OPT_READ_ONLY:
        return mount_add(a, "read_only", "1");
    case MOUNT_OPT_SET:
        return mount_add_set(a, optarg);
    case MOUNT_OPT_LOG:
        tfs_free(a->log_path);
        a->log_path = mount_abs(optarg);
        return a->log_path != NULL ? 0 : CLI_FAIL;
    case 'o':
        return mount_add(a, "fuse_opts", optarg);
    case 'f':
        a->foreground = true;
        return 0;
    case 'd':
        a->foreground = a->debug = true;
        return mount_add(a, "debug", "1");
    case 'h':
        mount_help(stdout);
        return -1;
    default:
        mount_help(stderr);
        return CLI_USAGE;
    }
}

static int mount_parse(int argc, char **argv, struct mount_args *a)
{
    struct option longopts[TFS_ARRAY_LEN(mount_map) + 9] = {
        {"immutable", no_argument, NULL, MOUNT_OPT_IMMUTABLE},
        {"read-only", no_argument, NULL, MOUNT_OPT_READ_ONLY},
        {"set", required_argument, NULL, MOUNT_OPT_SET},
        {"log", required_argument, NULL, MOUNT_OPT_LOG},
        {"foreground", no_argument, NULL, 'f'},
        {"debug", no_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
    };
    size_t n = 7;
    int rc = 0;
    int c;

    for (size_t i = 0; i < TFS_ARRAY_LEN(mount_map); i++)
        longopts[n++] = (struct option){mount_map[i].opt, required_argument,
                                        NULL, MOUNT_OPT_MAP + (int)i};
    while (rc == 0 &&
           (c = getopt_long(argc, argv, "o:fdhO:", longopts, NULL)) != -1)
        rc = c == 'O' ? mount_add_set(a, optarg) : mount_opt(a, c);
    if (rc == 0 && argc - optind != 2)
        rc = cli_usage_error("mount", "want URI MOUNTPOINT");
    return rc;
}

/*
 * Fork.  The parent waits until the child reports the mount ready (one
 * byte on the pipe) or exits, and returns true with the exit status to
 * use; the child returns false with the pipe's write end in *ready_fd.
 */
static bool mount_fork(int *ready_fd, int *status)
{
    int p[2];
    pid_t pid;
    char c = 0;
    ssize_t n;
    int ws;

    if (pipe2(p, O_CLOEXEC) < 0 || (pid = fork()) < 0) {
        perror("tierfs: mount: cannot daemonise");
        *status = CLI_FAIL;
        return true;
    }
    if (pid == 0) {
        close(p[0]);
        setsid();
        *ready_fd = p[1];
        return false;
    }
    close(p[1]);
    do {
        n = read(p[0], &c, 1);
    } while (n < 0 && errno == EINTR);
    close(p[0]);
    if (n == 1) {
        *status = CLI_OK;
        return true;
    }
    *status = CLI_FAIL;                 /* the child said why on stderr */
    if (waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws))
        *status = WEXITSTATUS(ws);
    return true;
}

static FILE *mount_log_file;

/* The daemon's log line: "2026-01-02T03:04:05Z tierfs[pid] LEVEL: msg". */
static void mount_log_to_file(void *arg, int level, const char *msg)
{
    static const char *names[] = {"emerg", "alert", "crit", "error",
                                  "warning", "notice", "info", "debug"};
    char t[32];
    time_t now = time(NULL);
    struct tm tm;

    gmtime_r(&now, &tm);
    strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(mount_log_file, "%s tierfs[%d] %s: %s\n", t, (int)getpid(),
            names[level & 7], msg);
}

static void mount_log_to_syslog(void *arg, int level, const char *msg)
{
    syslog(level, "%s", msg);
}

/*
 * Detach from the terminal once mounted: switch the log, point stdio at
 * /dev/null, leave the working directory, tell the parent.
 */
static int mount_detach(const struct mount_args *a, int ready_fd)
{
    int null_fd;

    if (a->log_path != NULL) {
        mount_log_file = fopen(a->log_path, "ae");
        if (mount_log_file == NULL)
            return tfs_err(-errno, "cannot open the log %s", a->log_path);
        setvbuf(mount_log_file, NULL, _IOLBF, 0);
        tfs_log_set_sink(mount_log_to_file, NULL);
    } else {
        openlog("tierfs", LOG_PID, LOG_DAEMON);
        tfs_log_set_sink(mount_log_to_syslog, NULL);
    }
    null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
        dup2(null_fd, STDIN_FILENO);
        dup2(null_fd, STDOUT_FILENO);
        dup2(null_fd, STDERR_FILENO);
        if (null_fd > STDERR_FILENO)
            close(null_fd);
    }
    if (chdir("/") < 0)
        TFS_WARN("cannot chdir to /: %s", tfs_strerror(-errno));
    if (write(ready_fd, "1", 1) != 1)
        TFS_WARN("cannot signal the parent: %s", tfs_strerror(-errno));
    close(ready_fd);
    return 0;
}

/* fsname=URI (query dropped, ',' and '\' escaped) for /proc/mounts. */
static int mount_set_fsname(struct tfs_fs *fs, const char *uri)
{
    struct tfs_buf b;
    size_t len = strcspn(uri, "?");
    int rc;

    tfs_buf_init(&b, 0);
    rc = tfs_buf_puts(&b, "fsname=");
    for (size_t i = 0; i < len && rc == 0; i++) {
        if (uri[i] == ',' || uri[i] == '\\')
            rc = tfs_buf_puts(&b, "\\");
        if (rc == 0)
            rc = tfs_buf_append(&b, &uri[i], 1);
    }
    if (rc == 0)
        rc = tfs_fs_set(fs, "fuse_opts", tfs_buf_str(&b));
    tfs_buf_cleanup(&b);
    return rc;
}

/* Create the file system with every setting; prints the error. */
static int mount_configure(struct tfs_fs *fs, const struct mount_args *a,
                           const char *uri)
{
    int rc = mount_set_fsname(fs, uri);

    if (rc < 0)
        return cli_fail("mount", uri, rc);
    for (size_t i = 0; i < a->n; i++) {
        rc = tfs_fs_set(fs, a->names[i], a->values[i]);
        if (rc < 0) {
            char what[128];
            snprintf(what, sizeof(what), "option %s=%s", a->names[i],
                     a->values[i]);
            return cli_fail("mount", what, rc);
        }
    }
    return CLI_OK;
}

/* Open, mount, (detach,) serve, close. */
static int mount_serve(const struct mount_args *a, const char *uri,
                       const char *mnt, int ready_fd)
{
    struct tfs_store *st = NULL;
    struct tfs_fs *fs = NULL;
    int status;
    int rc;

    if (a->debug)
        tfs_log_set_level(TFS_LOG_DEBUG);
    rc = tfs_store_open(&st, uri, cli_store_options);
    if (rc < 0)
        return cli_fail("mount", uri, rc);
    rc = tfs_fs_create(&fs);
    status = rc < 0 ? cli_fail("mount", uri, rc)
                    : mount_configure(fs, a, uri);
    if (status == CLI_OK) {
        rc = tfs_fs_open(fs, st, mnt);
        if (rc < 0)
            status = cli_fail("mount", mnt, rc);
    }
    if (status == CLI_OK && ready_fd >= 0) {
        rc = mount_detach(a, ready_fd);
        if (rc < 0)
            status = cli_fail("mount", mnt, rc);
    }
    if (status == CLI_OK) {
        TFS_LOGL(TFS_LOG_NOTICE, "mounted %s on %s", uri, mnt);
        rc = tfs_fs_run(fs);
        if (rc < 0)
            TFS_ERROR("%s: %s", mnt, tfs_strerror(rc));
        status = rc < 0 ? CLI_FAIL : CLI_OK;
    }
    tfs_fs_close(fs);
    tfs_store_close(st);
    if (status == CLI_OK)
        TFS_LOGL(TFS_LOG_NOTICE, "unmounted %s", mnt);
    return status;
}

/*
 * Block buffers are mapped on their own and recycled by the cache's pool
 * (tfs_malloc_faulted, ram.c), so malloc sees only the rest: libfuse's
 * 1 MiB buffer per FUSE thread, curl's 256 KiB per handle, the read
 * buffers.  A fixed mmap threshold keeps those mapped too, so what is
 * freed goes back to the kernel; glibc's own raises the threshold at the
 * first free of a mapped chunk, after which such buffers land in the
 * per-thread arenas, which keep their memory.  (Until 2026-12-02 the
 * threshold was 64 MiB, to keep the block buffers on the heap: with a
 * 1 GiB RAM tier full the daemon's RSS was 1.6 GiB, docs/cache.md
 * "Memory".)  This is the daemon's process, so tuning malloc here is
 * ours to do (the library never does it inside an application).
 */
static void mount_tune_malloc(void)
{
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
}

int cmd_mount(int argc, char **argv)
{
    struct mount_args a = {.n = 0};
    char *mnt = NULL;
    int ready_fd = -1;
    int rc = mount_parse(argc, argv, &a);

    if (rc == 0)
        mnt = mount_abs(argv[optind + 1]);
    if (rc == 0 && mnt == NULL)
        rc = CLI_FAIL;
    if (rc == 0 && !a.foreground && mount_fork(&ready_fd, &rc)) {
        tfs_free(mnt);
        mount_args_cleanup(&a);
        return rc;
    }
    if (rc == 0) {
        mount_tune_malloc();
        tfs_nofile_raise(NULL);         /* fds on demand; see writeback.md */
        rc = mount_serve(&a, argv[optind], mnt, ready_fd);
    }
    tfs_free(mnt);
    mount_args_cleanup(&a);
    if (mount_log_file != NULL)
        fclose(mount_log_file);
    return rc < 0 ? CLI_OK : rc;
}
