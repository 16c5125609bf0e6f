/* SPDX-License-Identifier: MIT */
/*
 * Shared pieces of the tierfs command-line tool.  Each command lives in
 * its own cmd_<name>.c and is listed in the table in main.c; what they
 * share is in util.c, target.c, xfer.c and fmt.c, never in main.c.
 * Commands return an exit status: 0 ok, 1 failure, 2 usage.
 */
#ifndef TFS_CLI_H
#define TFS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tierfs/store.h"

enum {
    CLI_OK = 0,
    CLI_FAIL = 1,
    CLI_USAGE = 2,
};

/* ---- util.c ---- */

/* Options given with --opt K=V before the command, "&"-joined. */
extern const char *cli_store_options;
extern bool cli_verbose;

/* Print "tierfs: CMD WHAT: strerror (detail)" on stderr; returns CLI_FAIL. */
int cli_fail(const char *cmd, const char *what, int rc);
/* Print "tierfs: CMD: msg" and the usage hint; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Parse a size ("8M"), or print a usage error naming the option. */
int cli_parse_size(const char *cmd, const char *opt, const char *s,
                   uint64_t *out);

/* Parse a whole number in [min, max], or print a usage error. */
int cli_parse_uint(const char *cmd, const char *opt, const char *s,
                   unsigned min, unsigned max, unsigned *out);

/* A subcommand of a command with several ("tierfs ckpt ls"). */
struct cli_sub {
    const char *name;
    int       (*run)(int argc, char **argv);
};

/*
 * Run the subcommand argv[1] names, with argv from it on; "--help", "-h"
 * or "help" print help to stdout; none or an unknown one prints help to
 * stderr (usage, exit 2).
 */
int cli_subcommand(const char *cmd, const struct cli_sub *subs, size_t n,
                   void (*help)(FILE *f), int argc, char **argv);

/* ---- target.c ---- */

/* A store URI split into the store's own URI and a key (or prefix). */
struct cli_target {
    struct tfs_store *st;               /* owned */
    char             *key;              /* owned; "" for the root */
    char             *store_uri;        /* owned, for messages */
};

/*
 * Split uri into store and key and open the store.  For s3 the bucket is
 * the store; for files the store is "/" and the key is the absolute path.
 * On failure prints one line naming uri and the cause, and returns
 * CLI_FAIL.
 */
int cli_open_target(const char *cmd, const char *uri,
                    struct cli_target *out);
void cli_close_target(struct cli_target *t);

/* ---- xfer.c ---- */

/*
 * Parallel ranged reads of [off, off+len) of key into fd, written in
 * order with write(); every read pins version so a changed object fails
 * with TFS_ECHANGED instead of mixing.
 */
struct cli_xfer {
    unsigned jobs;                      /* parallel reads */
    uint64_t chunk;                     /* bytes per read */
    bool     progress;                  /* progress line on stderr */
};
int cli_xfer_read(struct tfs_store *st, const char *key,
                  const char *version, uint64_t off, uint64_t len, int fd,
                  const struct cli_xfer *x);

/* ---- fmt.c ---- */

/* A JSON string literal for s (quotes and escapes included). */
void cli_json_str(FILE *f, const char *s);
/* "2026-11-29T19:02:00.123Z" from nanoseconds since the epoch. */
const char *cli_fmt_time(char *buf, size_t len, int64_t ns);

/* "12.3 MiB in 1.2 s (10.3 MB/s)" on stderr. */
void cli_print_rate(const char *verb, uint64_t bytes, uint64_t ns);

/* ---- the commands, one cmd_<name>.c each (bench: cmd_bench.c and
 * bench_*.c) ---- */

int cmd_ls(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_put(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_mount(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_umount(int argc, char **argv);
int cmd_sync(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_warmup(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_tier(int argc, char **argv);
int cmd_manifest(int argc, char **argv);

#endif /* TFS_CLI_H */
