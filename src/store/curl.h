/* SPDX-License-Identifier: MIT */
/* libcurl's process-wide set-up, once, for every user of curl in tierfs
   (the S3 backend, the cache group's peer client). */
#ifndef TFS_STORE_CURL_H
#define TFS_STORE_CURL_H

/* curl_global_init with tierfs's allocator, once; 0 or -ENOMEM. */
int tfs_curl_global_init(void);

#endif /* TFS_STORE_CURL_H */
