/* SPDX-License-Identifier: MIT */
/*
 * The cache group (docs/group.md): the member list and where a block
 * lives in it (member.c), how peers authenticate requests (auth.c), the
 * group object with its view of the members and their health (group.c),
 * the peer client the fetch engine asks before the store (peer.c), the
 * server that answers peers from this node's tiers (serve.c), and the
 * checkpoint copies that server keeps for its peers (ckstore.c).
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
#include "metrics/metrics.h"

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

/* ---- the group (group.c, peer.c, serve.c) ---- */

struct tfs_cache;
struct tfs_group;

#define TFS_GROUP_TIMEOUT_MS 3000       /* one peer request, by default */
#define TFS_GROUP_CONNECT_MS 500        /* its connect, at most */
#define TFS_GROUP_INFLIGHT 16           /* requests at once to one peer */
#define TFS_GROUP_WINDOW_S 30           /* requests' clock skew allowed */

struct tfs_group_cfg {
    const char *members;                /* the member list's path, or
                                           "dns:NAME:PORT": every address
                                           NAME resolves to, weight 1,
                                           resolved every 10 reload_ms */
    const char *listen;                 /* HOST:PORT this node serves on,
                                           as the list names it; NULL
                                           with serve off */
    const char *secret_file;            /* 0600, 16-512 bytes */
    bool        serve;                  /* answer peers */
    uint64_t    timeout_ms;             /* 0: TFS_GROUP_TIMEOUT_MS */
    unsigned    inflight;               /* 0: TFS_GROUP_INFLIGHT */
    uint64_t    reload_ms;              /* how often the list is looked
                                           at; 0: 1000 */
    const char *tls_ca;                 /* PEM CA file: peers over https,
                                           their certificates checked
                                           against it; NULL: plain http */
    const char *tls_cert;               /* PEM: this node's certificate
                                           (serving with tls_ca) */
    const char *tls_key;                /* PEM: its key, mode 0600 */
    unsigned    fault_corrupt;          /* fault injection, for tests:
                                           flip a byte of every Nth
                                           answer after its checksum */
    bool        self_elsewhere;         /* with serve off: listen names
                                           this node's line, served by
                                           another process of the node
                                           (its mount); a checkpoint
                                           writer that must not count it
                                           as another node */
    const char *ckpt_dir;   /* where checkpoint copies are kept; NULL: none */
    uint64_t    ckpt_max;   /* bytes at most; 0: copies off */
    unsigned    ckpt_keep;  /* newest steps kept per namespace; 0: 2 */
};

/*
 * Join the group of cfg in front of cache c (open, its store's identity
 * fixed): load the member list and the secret, start the server when
 * serving (its listener bound to cfg->listen, which the list must name),
 * watch the list for changes, and make the group the cache's source of
 * blocks before the store.  c may be NULL (no cache): then the group is
 * no source of blocks, and its server answers block requests 503; it
 * still keeps checkpoint copies, or is a client of them.  Serving with
 * ckpt_dir set and ckpt_max > 0, it keeps peers' checkpoint copies in
 * ckpt_dir (made 0700 if missing; its parent must exist).  Errors name
 * the file or address and the cause: TFS_EFORMAT (the list),
 * -EPERM/-EINVAL (the secret file), TFS_EOPTION (cfg), -EADDRINUSE (the
 * listener), -errno/-EPERM (ckpt_dir).
 */
int tfs_group_open(struct tfs_group **out, const struct tfs_group_cfg *cfg,
                   struct tfs_cache *c);
/* Leave: the cache reads the store alone again; stop the server. */
void tfs_group_close(struct tfs_group *g);
/* The port the server listens on (0 when not serving). */
uint16_t tfs_group_port(const struct tfs_group *g);
/* Re-read the member list now (SIGHUP): 0, or why the new one was
   refused (the old one stays). */
int tfs_group_reload(struct tfs_group *g);

/* Its figures, for the registry: the "group" section and the "peers"
   table, one row a member ever listed. */
#define TFS_GROUP_METRICS(X)                                               \
    X(U64, members, GAUGE, COUNT, NULL, "members in the group's list")     \
    X(STR, self, INFO, NONE, NULL, "this member, or \"\" (client only)")   \
    X(U64, asked, COUNTER, COUNT, NULL,                                    \
      "block reads that asked a peer")                                     \
    X(U64, peer_hits, COUNTER, COUNT, NULL,                                \
      "block reads a peer answered")                                       \
    X(U64, peer_bytes, COUNTER, BYTES, NULL, "bytes received from peers")  \
    X(U64, fallbacks, COUNTER, COUNT, NULL,                                \
      "peer requests that failed, then read from the store")               \
    X(U64, owned, COUNTER, COUNT, NULL,                                    \
      "block reads this node owns, read from the store")                   \
    X(U64, skipped, COUNTER, COUNT, NULL,                                  \
      "block reads whose owners were all suspect: read from the store")    \
    X(F64, hit_rate, GAUGE, NONE, NULL,                                    \
      "peer_hits / asked")                                                 \
    X(U64, served, COUNTER, COUNT, NULL, "blocks served to peers")         \
    X(U64, served_bytes, COUNTER, BYTES, NULL, "bytes served to peers")    \
    X(U64, served_ram, COUNTER, COUNT, NULL,                               \
      "blocks served from the RAM tier")                                   \
    X(U64, served_disk, COUNTER, COUNT, NULL,                              \
      "blocks served from the disk tier")                                  \
    X(U64, served_store, COUNTER, COUNT, NULL,                             \
      "blocks served after a read of the store")                           \
    X(U64, serve_errors, COUNTER, COUNT, NULL,                             \
      "peer requests answered with an error")                              \
    X(U64, refused, COUNTER, COUNT, NULL,                                  \
      "peer requests refused: authentication, replay, malformed, "         \
      "checkpoint copies off")                                             \
    X(U64, refused_store, COUNTER, COUNT, NULL,                            \
      "peer requests for another store or block size (409)")               \
    X(U64, reloads, COUNTER, COUNT, NULL, "member lists loaded")           \
    X(U64, reload_errors, COUNTER, COUNT, NULL,                            \
      "member lists refused (the old one kept)")                           \
    X(U64, ckpt_puts, COUNTER, COUNT, NULL,                                \
      "checkpoint copies stored for peers")                                \
    X(U64, ckpt_put_bytes, COUNTER, BYTES, NULL,                           \
      "bytes of checkpoint copies stored")                                 \
    X(U64, ckpt_gets, COUNTER, COUNT, NULL,                                \
      "checkpoint copies sent back to peers")                              \
    X(U64, ckpt_get_bytes, COUNTER, BYTES, NULL,                           \
      "bytes of checkpoint copies sent back")                              \
    X(U64, ckpt_lists, COUNTER, COUNT, NULL,                               \
      "checkpoint copy lists sent")                                        \
    X(U64, ckpt_full, COUNTER, COUNT, NULL,                                \
      "checkpoint copies refused for the quota (507)")                     \
    X(U64, ckpt_bad, COUNTER, COUNT, NULL,                                 \
      "checkpoint copy requests refused: bad key, length or checksum")     \
    X(U64, ckpt_removed, COUNTER, COUNT, NULL,                             \
      "checkpoint copy files removed by retention")                        \
    X(U64, ckpt_bytes, GAUGE, BYTES, NULL,                                 \
      "bytes of checkpoint copies kept now")

#define TFS_GROUP_PEER_METRICS(X)                                          \
    X(U64, member, GAUGE, COUNT, NULL, "1 while in the member list")       \
    X(F64, weight, GAUGE, NONE, NULL, "its weight in the list")            \
    X(U64, requests, COUNTER, COUNT, NULL, "block requests sent to it")    \
    X(U64, bytes, COUNTER, BYTES, NULL, "block bytes received from it")    \
    X(U64, errors, COUNTER, COUNT, NULL,                                   \
      "requests that failed: connect, timeout, HTTP error, bad answer")    \
    X(U64, timeouts, COUNTER, COUNT, NULL, "requests that timed out")      \
    X(U64, corrupt, COUNTER, COUNT, NULL,                                  \
      "answers that failed their checksum, id, version or length")         \
    X(U64, inflight, GAUGE, COUNT, NULL, "requests to it now")             \
    X(U64, suspect, GAUGE, COUNT, NULL, "1 while skipped after a failure") \
    X(F64, suspect_seconds, COUNTER, SECONDS, NULL,                        \
      "time it has been suspect, in all")                                  \
    X(HIST, latency, SUMMARY, US, NULL, "block requests answered")

struct tfs_group_metrics {
    TFS_GROUP_METRICS(TFS_METRIC_FIELD)
};
struct tfs_group_peer_metrics {
    TFS_GROUP_PEER_METRICS(TFS_METRIC_FIELD)
};

/* A snapshot: the group's figures, and a row per peer (owned). */
struct tfs_group_snap {
    struct tfs_group_metrics       g;
    char                           self[TFS_GROUP_HOST_MAX + 8];
    struct tfs_group_peer_metrics *peers;   /* n of them */
    char                         **keys;    /* "host:port" of each */
    size_t                         n;
};

/* 0 or -ENOMEM (then s is empty, fine to clean up). */
int tfs_group_snap_get(struct tfs_group *g, struct tfs_group_snap *s);
void tfs_group_snap_cleanup(struct tfs_group_snap *s);

/* ---- checkpoint copies on peers: the client (ckpt.c) ---- */

#define TFS_GROUP_KEY_MAX (TFS_GROUP_HOST_MAX + 8)  /* "[host]:port" */

/*
 * The members that keep the checkpoint copies of place (a string of the
 * rank's own: its namespace and rank), best first: rendezvous order for
 * place over the list, skipping this node (the member cfg->listen names;
 * without one, every member at an address of this machine, whose copy
 * would not outlive it) and suspect members.  Their "host:port" into
 * out; how many, at most max.
 */
size_t tfs_group_ckpt_members(struct tfs_group *g, const char *place,
                              char (*out)[TFS_GROUP_KEY_MAX], size_t max);
/*
 * Send the regular file open at fd as key ("NS/step-N/NAME", the wire's
 * name: docs/group.md) to member, by deadline_ns (0: none; a transfer
 * slower than 64 KiB/s for the group timeout is cut).  0 once the member
 * has checked its digest and fsynced it.  -ENOSPC (its quota),
 * -EACCES (refused), -EHOSTUNREACH, -ETIMEDOUT, -EPROTO; the detail
 * names the member, the key and the cause.
 */
int tfs_group_ckpt_put(struct tfs_group *g, const char *member,
                       const char *key, int fd, uint64_t deadline_ns);
/*
 * Fetch key from member into fd (from offset 0; at most max bytes):
 * 0 with *len once the bytes matched the digest the member kept;
 * -ENOENT when it holds no such copy, TFS_ECORRUPT, -EFBIG, and the
 * errors of put.
 */
int tfs_group_ckpt_get(struct tfs_group *g, const char *member,
                       const char *key, int fd, uint64_t max,
                       uint64_t deadline_ns, uint64_t *len);
/* The member's list of copies of namespace ns ("tierfs-ckpt-list 1",
   then "STEP NAME SIZE" lines), NUL-terminated, tfs_malloc'd. */
int tfs_group_ckpt_list(struct tfs_group *g, const char *member,
                        const char *ns, uint64_t deadline_ns, char **text,
                        size_t *len);

#endif /* TFS_GROUP_H */
