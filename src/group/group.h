/* SPDX-License-Identifier: MIT */
/*
 * The cache group's pieces that need no network (docs/group.md): the
 * member list and where a block lives in it (member.c), and how peers
 * authenticate requests (auth.c).  The peer server and client build on
 * these.
 *
 * Placement is weighted rendezvous (highest random weight) hashing:
 * every node ranks the members for a block id alone, with no directory,
 * and all nodes agree; a member that comes or goes moves only the blocks
 * it owns (about 1/N of them).
 */
#ifndef TFS_GROUP_H
#define TFS_GROUP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hmap.h"

#define TFS_GROUP_MAX_MEMBERS 65536
#define TFS_GROUP_HOST_MAX 256

/* ---- members (member.c) ---- */

struct tfs_gmember {
    char     host[TFS_GROUP_HOST_MAX];  /* name, IPv4, or IPv6 (no []) */
    uint16_t port;
    double   weight;                    /* > 0: its cache size, or 1 */
    uint64_t seed;                      /* hash of "host:port", its HRW id */
};

struct tfs_gmembers {
    struct tfs_gmember *m;              /* owned */
    size_t              n;
};

/*
 * Parse a member list: one member a line, "host:port [weight]", where
 * host is a name, an IPv4 address or "[IPv6]", and weight a positive
 * number or size ("500G": the member's cache size; default 1); '#' starts
 * a comment.  what names the text in errors.  TFS_EFORMAT with a detail
 * "WHAT:LINE: cause" (a bad host or port, a weight that is not positive,
 * a member listed twice, no member at all), -ENOMEM.  *out is written
 * only on success.
 */
int tfs_gmembers_parse(const char *text, size_t len, const char *what,
                       struct tfs_gmembers *out);
/* The same from file path (at most 4 MiB); -errno naming the file. */
int tfs_gmembers_load(const char *path, struct tfs_gmembers *out);
void tfs_gmembers_cleanup(struct tfs_gmembers *g);
/* The index of host:port in g, or -1. */
long tfs_gmembers_find(const struct tfs_gmembers *g, const char *host,
                       uint16_t port);

/* Member m's rendezvous score for key (len bytes): larger wins. */
double tfs_gmember_score(const struct tfs_gmember *m, const void *key,
                         size_t len);

/* Whether member i may be asked now (not suspect, not this node...). */
typedef bool tfs_gmember_usable_fn(void *arg, size_t i);

/*
 * The members usable for key, best first: at most max indexes into
 * order; returns how many.  usable NULL: every member.  The same on
 * every node for the same list.
 */
size_t tfs_gmembers_rank(const struct tfs_gmembers *g, const void *key,
                         size_t len, tfs_gmember_usable_fn *usable,
                         void *arg, size_t *order, size_t max);

/* ---- request authentication (auth.c) ---- */

#define TFS_GAUTH_SECRET_MIN 16         /* bytes */
#define TFS_GAUTH_SECRET_MAX 512
#define TFS_GAUTH_NONCE_MIN 16          /* hex digits */
#define TFS_GAUTH_NONCE_MAX 64
#define TFS_GAUTH_SEEN_MAX (1u << 20)   /* nonces remembered at once */

/*
 * A group secret and the nonces seen within the time window.  A request
 * carries its method, the block id (hex), its time (Unix seconds), a
 * fresh nonce (hex) and HMAC-SHA256 over the four with the secret.  It is
 * accepted once: within window_s of the receiver's clock, with a good
 * signature, and a nonce not seen in the window.  Thread-safe.
 */
struct tfs_gauth {
    unsigned char    key[TFS_GAUTH_SECRET_MAX];
    size_t           key_len;
    uint64_t         window_s;
    pthread_mutex_t  lock;
    struct tfs_hmap  seen;              /* struct gauth_nonce; lock */
    struct gauth_nonce *head;           /* oldest first; lock */
    struct gauth_nonce *tail;           /* lock */
};

/* From secret (len bytes, at least TFS_GAUTH_SECRET_MIN); -EINVAL (with
 * a detail), -ENOMEM. */
int tfs_gauth_init(struct tfs_gauth *a, const void *secret, size_t len,
                   uint64_t window_s);
/*
 * From a secret file: owned by the caller's uid and readable by no one
 * else (mode 0600 or 0400), its contents the secret (one trailing newline
 * dropped).  -EPERM for a file others may read, -EINVAL for a short one,
 * -errno; the detail names the file.
 */
int tfs_gauth_load(struct tfs_gauth *a, const char *path, uint64_t window_s);
void tfs_gauth_cleanup(struct tfs_gauth *a);
/* The signature of a request, 64 hex digits and a NUL into sig. */
void tfs_gauth_sign(const struct tfs_gauth *a, const char *method,
                    const char *block, uint64_t time_s, const char *nonce,
                    char sig[65]);
/*
 * Accept a request at the receiver's time now_s, or refuse it: -EACCES
 * with a detail (a malformed nonce, a time outside the window, a bad
 * signature, a nonce already seen), -EAGAIN when TFS_GAUTH_SEEN_MAX
 * nonces are held already, -ENOMEM.  An accepted nonce is remembered
 * until its time is out of the window.
 */
int tfs_gauth_check(struct tfs_gauth *a, const char *method,
                    const char *block, uint64_t time_s, const char *nonce,
                    const char *sig, uint64_t now_s);

#endif /* TFS_GROUP_H */
