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
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

#endif /* TFS_INTEG_UTIL_H */
