/* SPDX-License-Identifier: MIT */
/*
 * Output helpers for commands: JSON strings and timestamps.
 */
#include <stdio.h>
#include <time.h>

#include "cli/cli.h"

void cli_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
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
