/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the mounted integration tests (fuse_mount.c,
 * fuse_wb.c): bounded formatting, clocks, seeded data, mount checks and
 * running the tierfs binary with a time limit.  Included once by each
 * test program; every function is static inline so a program need not
 * use them all.
 */
#ifndef TFS_INTEG_UTIL_H
#define TFS_INTEG_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "tierfs/err.h"
#include "tierfs/store.h"

/* The run's surroundings, set by integ_setup(). */
static const char *t_bin;               /* the tierfs binary */
static bool t_s3;                       /* the remote is S3 */
static char t_work[PATH_MAX];           /* this run's scratch directory */
static char t_base[1024];               /* remote root: a dir or s3 URI */
static struct tfs_store *t_st;          /* the remote, for uploads, checks */
static unsigned t_seq;                  /* unique names within the run */
static rlim_t t_nofile;                 /* the daemon's fd limit; 0: as is */

#define MOUNT_WAIT_MS 15000
#define EXIT_WAIT_MS 30000

/* The one mount a case runs at a time. */
static struct {
    char  dir[PATH_MAX];
    char  log[PATH_MAX + 8];
    pid_t pid;                          /* tierfs mount -f, or 0 */
} t_mnt;

/* snprintf that fails the run instead of truncating a path. */
static inline void sfmt(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void sfmt(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr, "%s: name too long: %s\n",
                program_invocation_short_name, out);
        abort();
    }
}

static inline uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* len pseudo-random bytes from seed (the same seed, the same bytes). */
static inline unsigned char *gen_data(size_t len, uint64_t seed)
{
    unsigned char *p = malloc(len ? len : 1);

    for (size_t i = 0; p != NULL && i < len; i += 8) {
        uint64_t v = rng_next(&seed);
        memcpy(p + i, &v, len - i < 8 ? len - i : 8);
    }
    return p;
}

static inline bool is_mounted(const char *dir)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    char mnt[4096];
    bool found = false;

    if (f == NULL)
        return false;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 &&
            strcmp(mnt, dir) == 0)
            found = true;
    }
    fclose(f);
    return found;
}

static inline void print_file(const char *path)
{
    char line[512];
    FILE *f = fopen(path, "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        fprintf(stderr, "    | %s", line);
    if (f != NULL)
        fclose(f);
}

/* Wait for pid up to ms; its exit status, or -1 on timeout (not reaped). */
static inline int wait_pid(pid_t pid, unsigned ms)
{
    uint64_t end = now_ms() + ms;
    int ws;

    for (;;) {
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid)
            return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        if (r < 0)
            return -2;
        if (now_ms() >= end)
            return -1;
        sleep_ms(5);
    }
}

/* Run argv to completion (bounded), output into log; its exit status. */
static inline int run_cmd(char *const argv[], const char *log, unsigned ms)
{
    pid_t pid = fork();
    int rc;

    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    rc = wait_pid(pid, ms);
    if (rc == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return rc;
}

/* ---- mounting ---- */

/* A fresh empty directory under the work dir (a staging dir gives others
 * nothing: docs/security.md). */
static inline void new_dir(char *out, size_t size, const char *what)
{
    mode_t mode = strcmp(what, "staging") ? 0755 : 0700;

    sfmt(out, size, "%s/%s-%u", t_work, what, ++t_seq);
    CHECK(mkdir(out, mode) == 0);
    CHECK(chmod(out, mode) == 0);
}

/* Forget a mount a failed case left behind. */
static inline void mnt_cleanup(void)
{
    if (t_mnt.dir[0] != '\0' && is_mounted(t_mnt.dir))
        umount2(t_mnt.dir, MNT_DETACH);
    if (t_mnt.pid > 0) {
        kill(t_mnt.pid, SIGTERM);
        if (wait_pid(t_mnt.pid, 5000) == -1) {
            kill(t_mnt.pid, SIGKILL);
            waitpid(t_mnt.pid, NULL, 0);
        }
    }
    t_mnt.pid = 0;
}

/*
 * Mount uri with tierfs mount -f plus args (NULL-terminated) on a fresh
 * directory (the daemon under t_nofile descriptors when set) and wait
 * until it serves.  Fails the case, showing the daemon's log, if it does
 * not come up.
 */
static inline void mnt_start(const char *uri, const char *const args[])
{
    char *argv[48] = {(char *)t_bin, "mount", "-f", (char *)uri, t_mnt.dir};
    char ctl[PATH_MAX + 32];
    struct stat sb;
    size_t n = 5;
    uint64_t end;

    mnt_cleanup();
    new_dir(t_mnt.dir, sizeof(t_mnt.dir), "mnt");
    sfmt(t_mnt.log, sizeof(t_mnt.log), "%s.log", t_mnt.dir);
    for (size_t i = 0; args != NULL && args[i] != NULL && n < 46; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    t_mnt.pid = fork();
    if (t_mnt.pid == 0) {
        int fd = open(t_mnt.log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        struct rlimit rl = {t_nofile, t_nofile};
        if (t_nofile > 0 && setrlimit(RLIMIT_NOFILE, &rl) < 0)
            _exit(126);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    CHECK(t_mnt.pid > 0);
    sfmt(ctl, sizeof(ctl), "%s/.tierfs-stats", t_mnt.dir);
    for (end = now_ms() + MOUNT_WAIT_MS; now_ms() < end; sleep_ms(10)) {
        if (is_mounted(t_mnt.dir) && stat(ctl, &sb) == 0)
            return;
        if (wait_pid(t_mnt.pid, 0) != -1) {     /* it exited */
            t_mnt.pid = 0;
            break;
        }
    }
    fprintf(stderr, "    tierfs mount %s %s did not come up; its log:\n",
            uri, t_mnt.dir);
    print_file(t_mnt.log);
    TEST_FAIL_("mount failed");
}

/* tierfs umount, then the daemon must exit 0 and the mount be gone. */
static inline void mnt_stop(void)
{
    char log[PATH_MAX + 16];
    char *argv[] = {(char *)t_bin, "umount", t_mnt.dir, NULL};
    int rc;

    sfmt(log, sizeof(log), "%s.umount", t_mnt.dir);
    rc = run_cmd(argv, log, 20000);
    if (rc != 0)
        print_file(log);
    CHECK_EQ(rc, 0);
    rc = wait_pid(t_mnt.pid, EXIT_WAIT_MS);
    if (rc != 0)
        print_file(t_mnt.log);
    CHECK_EQ(rc, 0);
    t_mnt.pid = 0;
    CHECK(!is_mounted(t_mnt.dir));
}

/* Remove what this run put on the remote. */
static inline int integ_cleanup_page(void *arg,
                                     const struct tfs_list_page *page)
{
    (void)arg;
    for (size_t i = 0; i < page->n_entries; i++)
        tfs_store_remove(t_st, page->entries[i].key);
    return 0;
}

static inline void integ_rm_tree(const char *path)
{
    char cmd[PATH_MAX + 32];

    if (strncmp(path, "/tmp/", 5) != 0)
        return;
    sfmt(cmd, sizeof(cmd), "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", path);
}

/*
 * From TFS_TEST_BIN and TFS_TEST_REMOTE (posix, or s3://bucket/prefix):
 * a scratch directory /tmp/tfs-TAG-XXXXXX, the remote root (a directory in
 * it, or TAG-PID-TIME under the S3 prefix) open in t_st, and cleanup run
 * at exit.  0, or the exit code: 2 (not configured), 77 (no /dev/fuse:
 * callers treat it as a failure), 1.
 */
static inline int integ_setup(const char *tag, void (*cleanup)(void))
{
    const char *prog = program_invocation_short_name;
    const char *remote = getenv("TFS_TEST_REMOTE");
    int rc;

    t_bin = getenv("TFS_TEST_BIN");
    if (t_bin == NULL || remote == NULL) {
        fprintf(stderr, "%s: set TFS_TEST_BIN and TFS_TEST_REMOTE "
                "(posix or s3://bucket/prefix)\n", prog);
        return 2;
    }
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
        fprintf(stderr, "%s: no /dev/fuse\n", prog);
        return 77;
    }
    sfmt(t_work, sizeof(t_work), "/tmp/tfs-%s-XXXXXX", tag);
    if (mkdtemp(t_work) == NULL)
        return 1;
    t_s3 = strncmp(remote, "s3://", 5) == 0;
    if (t_s3)
        sfmt(t_base, sizeof(t_base), "%s/%s-%d-%ld", remote, tag,
             (int)getpid(), (long)time(NULL));
    else
        sfmt(t_base, sizeof(t_base), "%s/remote", t_work);
    if (!t_s3 && mkdir(t_base, 0755) < 0)
        return 1;
    rc = tfs_store_open(&t_st, t_base, NULL);
    if (rc < 0) {
        fprintf(stderr, "%s: cannot open %s: %s (%s)\n", prog, t_base,
                tfs_strerror(rc), tfs_errdetail());
        return 1;
    }
    atexit(cleanup);
    return 0;
}

/* After the tests: cleanup(), the run's objects off S3, the scratch
 * directory (kept with TFS_TEST_KEEP=1); returns rc. */
static inline int integ_finish(int rc, void (*cleanup)(void))
{
    cleanup();
    if (t_s3)
        tfs_store_list_all(t_st, "", NULL, integ_cleanup_page, NULL);
    tfs_store_close(t_st);
    if (getenv("TFS_TEST_KEEP") == NULL)
        integ_rm_tree(t_work);
    return rc;
}

#endif /* TFS_INTEG_UTIL_H */
