/* SPDX-License-Identifier: MIT */
/*
 * Small file-system helpers shared by the modules (fsutil.c; not
 * installed):
 *
 *   tfs_mkdirs               mkdir -p for a path the user chose (for a
 *                            private dir use tfs_dir_open_path, util.h)
 *   tfs_mountinfo_unescape   the octal escapes of /proc/self/mountinfo
 */
#ifndef TFS_COMMON_FSUTIL_H
#define TFS_COMMON_FSUTIL_H

/*
 * Create path and every missing parent with mode (umask applies), as
 * mkdir -p does; symlinks on the way are followed.  0 when it is there as
 * a directory afterwards; -ENOTDIR when a component is something else,
 * -ENOENT for "", else the -errno of the mkdir that failed.  The error
 * detail names the component.
 */
int tfs_mkdirs(const char *path, unsigned mode);

/*
 * Undo mountinfo's octal escapes in place: \ooo (first digit 0-3) becomes
 * that byte (\040 a space, \011 a tab, \012 a newline, \134 a backslash);
 * any other backslash, a truncated escape included, is kept as it is.
 */
void tfs_mountinfo_unescape(char *s);

#endif /* TFS_COMMON_FSUTIL_H */
