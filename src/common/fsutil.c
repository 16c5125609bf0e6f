/* SPDX-License-Identifier: MIT */
/*
 * Small file-system helpers (fsutil.h): mkdir -p, and mountinfo's
 * escapes.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fsutil.h"
#include "common/util.h"

/* mkdir one prefix of the path; an existing one must be a directory. */
static int fsutil_mkdir(const char *p, unsigned mode)
{
    struct stat sb;

    if (mkdir(p, (mode_t)mode) == 0)
        return 0;
    if (errno != EEXIST)
        return tfs_err(-errno, "cannot create directory %s", p);
    if (stat(p, &sb) < 0)
        return tfs_err(-errno, "cannot create directory %s", p);
    if (!S_ISDIR(sb.st_mode))
        return tfs_err(-ENOTDIR, "cannot create directory %s: not a "
                       "directory", p);
    return 0;
}

int tfs_mkdirs(const char *path, unsigned mode)
{
    char *p;
    int rc = 0;

    if (path[0] == '\0')
        return tfs_err(-ENOENT, "cannot create directory \"\"");
    p = tfs_strdup(path);
    if (p == NULL)
        return -ENOMEM;
    for (char *c = p + 1; rc == 0; c++) {
        char save = *c;

        if (save != '/' && save != '\0')
            continue;
        if (c[-1] != '/') {             /* "a//b", "a/": once is enough */
            *c = '\0';
            rc = fsutil_mkdir(p, mode);
            *c = save;
        }
        if (save == '\0')
            break;
    }
    tfs_free(p);
    return rc;
}

void tfs_mountinfo_unescape(char *s)
{
    char *w = s;

    for (char *r = s; *r != '\0'; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' &&
            r[2] <= '7' && r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + r[3] - '0');
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}
