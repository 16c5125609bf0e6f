/* SPDX-License-Identifier: MIT */
/*
 * Export macro, version numbers and the ABI check shared by every public
 * header.  The library is built with -fvisibility=hidden; only functions
 * marked TFS_API are exported from libtierfs.so.
 */
#ifndef TIERFS_API_H
#define TIERFS_API_H

#if defined(TFS_BUILDING_LIBRARY) && defined(__GNUC__)
#define TFS_API __attribute__((visibility("default")))
#else
#define TFS_API
#endif

#if defined(__GNUC__)
#define TFS_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define TFS_PRINTF(fmt, args)
#endif

#define TFS_VERSION_MAJOR 0
#define TFS_VERSION_MINOR 1
#define TFS_VERSION_PATCH 0
#define TFS_VERSION_STRING "0.1.0"

/*
 * Bumped whenever a public function changes its prototype or meaning.  The
 * Python binding refuses to load a library whose ABI it does not know.
 */
#define TFS_ABI_VERSION 2

#endif /* TIERFS_API_H */
