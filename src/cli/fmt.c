/* SPDX-License-Identifier: MIT */
/*
 * Output helpers for commands: JSON strings, timestamps, transfer rates.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "common/json.h"
#include "common/util.h"

/* s as a JSON string literal, escaped by the one escaper
   (tfs_json_put_str); out of memory prints nothing. */
void cli_json_str(FILE *f, const char *s)
{
    struct tfs_buf b;

    tfs_buf_init(&b, 0);
    if (tfs_json_put_str(&b, s, strlen(s)) == 0)
        fwrite(b.p, 1, b.len, f);
    tfs_buf_cleanup(&b);
}

const char *cli_fmt_time(char *buf, size_t len, int64_t ns)
{
    time_t sec = (time_t)(ns / 1000000000);
    struct tm tm;

    if (ns < 0 || gmtime_r(&sec, &tm) == NULL) {
        snprintf(buf, len, "-");
        return buf;
    }
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, (int)((ns / 1000000) % 1000));
    return buf;
}

void cli_print_rate(const char *verb, uint64_t bytes, uint64_t ns)
{
    char b[32];
    double s = (double)ns / 1e9;

    fprintf(stderr, "%s %s in %.2f s (%.1f MB/s)\n", verb,
            tfs_fmt_bytes(b, sizeof(b), (double)bytes), s,
            s > 0 ? (double)bytes / 1e6 / s : 0.0);
}
