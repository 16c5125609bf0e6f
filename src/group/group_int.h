/* SPDX-License-Identifier: MIT */
/*
 * The cache group's insides, shared by group.c (the object, its view of
 * the members, the list watcher, the figures), peer.c (the client),
 * serve.c (the server) and ckstore.c (the checkpoint copies the server
 * keeps).  docs/group.md has the design.
 *
 * Locking: g->lock guards the view pointer, the peers map and list and
 * each peer's list fields (member, weight); a view is immutable once
 * published and lives while referenced.  Each peer's lock guards its
 * connections, its in-flight count and its suspect state.  Never take
 * g->lock while holding a peer's lock.
 */
#ifndef TFS_GROUP_INT_H
#define TFS_GROUP_INT_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "cache/peer.h"
#include "common/util.h"
#include "group/group.h"
#include "metrics/hist.h"

#define GROUP_KEY_MAX (TFS_GROUP_HOST_MAX + 8)  /* "[host]:port" */
#define GROUP_BACKOFF_MIN_NS 1000000000ull      /* 1 s after a failure */
#define GROUP_BACKOFF_MAX_NS 30000000000ull     /* doubling up to 30 s */
#define GROUP_DNS_TICKS 10              /* a DNS name: every 10 reloads */

/* One member, once listed: kept (with its figures) until close. */
struct gpeer {
    struct tfs_hstr   h;                /* key: "host:port"; g->peers */
    char              key[GROUP_KEY_MAX];
    char              url[GROUP_KEY_MAX + 16]; /* "http://host:port" */
    struct gpeer     *next;             /* every peer; g->lock */
    bool              member;           /* in the current list; g->lock */
    double            weight;           /* g->lock */

    pthread_mutex_t   lock;
    pthread_cond_t    cond;             /* a slot came free; lock */
    unsigned          inflight;         /* lock */
    CURL            **idle;             /* kept-alive handles; lock */
    size_t            n_idle;           /* lock */
    uint64_t          suspect_until;    /* ns; 0: not suspect; lock */
    uint64_t          suspect_since;    /* ns, while suspect; lock */
    uint64_t          suspect_ns;       /* in all, past spells; lock */
    uint64_t          backoff_ns;       /* the next spell's; lock */
    atomic_uint_fast64_t until;         /* suspect_until, read unlocked */
    atomic_bool       probing;          /* one request tries it again */

    atomic_uint_fast64_t requests, bytes, errors, timeouts, corrupt;
    struct tfs_hist   latency;
};

/* The member list as loaded, with each member's peer (NULL: this node). */
struct gview {
    unsigned            refs;           /* g->lock */
    struct tfs_gmembers m;
    struct gpeer      **peer;           /* m.n of them */
    long                self;           /* index of this node, or -1 */
};

struct gserve;
struct gck;

struct tfs_group {
    char               *members;        /* owned copies of the cfg */
    char               *listen;
    char                self_key[GROUP_KEY_MAX]; /* "" when client only */
    bool                serve;
    uint64_t            timeout_ms;
    unsigned            inflight;
    uint64_t            reload_ms;
    unsigned            fault_corrupt;  /* every Nth answer; 0: none */
    char               *tls_ca;         /* owned path; NULL: plain http */
    char               *tls_cert;       /* owned PEM text (serving) */
    char               *tls_key;        /* owned PEM text, cleansed */
    atomic_uint_fast64_t answers;       /* for fault_corrupt */
    struct tfs_cache   *c;              /* borrowed; NULL: no cache */
    struct tfs_gauth    auth;

    pthread_mutex_t     lock;
    struct gview       *view;           /* lock */
    struct tfs_hmap     peers;          /* struct gpeer; lock */
    struct gpeer       *all;            /* lock */
    size_t              n_all;          /* lock */

    pthread_t           watcher;
    bool                watching;
    bool                sourced;        /* added to the cache's sources */
    pthread_cond_t      wake;           /* lock: stop or reload now */
    bool                stopping;       /* lock */
    struct stat         list_st;        /* the list loaded; watcher */
    uint64_t            dns_hash;       /* of the list DNS gave last */

    struct gserve      *srv;            /* NULL when not serving */
    struct gck         *ck;             /* checkpoint copies; NULL: off */
    char               *ckpt_dir;       /* owned copy of the cfg's */
    uint64_t            ckpt_max;
    unsigned            ckpt_keep;

    atomic_uint_fast64_t asked, peer_hits, peer_bytes, fallbacks, owned,
                         skipped, served, served_bytes, served_ram,
                         served_disk, served_store, serve_errors, refused,
                         refused_store, reloads, reload_errors,
                         ckpt_puts, ckpt_put_bytes, ckpt_gets,
                         ckpt_get_bytes, ckpt_lists, ckpt_full, ckpt_bad;
};

/* ---- group.c ---- */
struct gview *gview_get(struct tfs_group *g);
void gview_put(struct tfs_group *g, struct gview *v);

/* ---- peer.c ---- */
int gpeer_init(struct gpeer *p, const char *host, uint16_t port,
               bool tls);
void gpeer_cleanup(struct gpeer *p);
/* Is p skipped now (suspect)? */
bool gpeer_suspect(struct gpeer *p, uint64_t now_ns);
/* The fetch engine's source (tfs_cache_source_fn) with arg the group. */
int gpeer_source(void *arg, const struct tfs_peer_block *pb,
                 uint64_t deadline_ns, unsigned char *dst);
/* p's figures now. */
void gpeer_metrics(struct gpeer *p, struct tfs_group_peer_metrics *m);
/*
 * One request's slot on p (peer.c; ckpt.c uses them too): take waits
 * until end_ns while every slot is busy and gives a kept-alive handle or
 * NULL (-EBUSY: none came free, -EAGAIN: p is suspect, or another
 * request is its probe); give returns it (keep: the handle may be
 * reused).  fail makes p suspect for its next back-off; ok clears that.
 */
int gpeer_take(struct tfs_group *g, struct gpeer *p, uint64_t end_ns,
               CURL **h, bool *probe);
void gpeer_give(struct tfs_group *g, struct gpeer *p, CURL *h, bool keep,
                bool probe);
void gpeer_fail(struct gpeer *p);
void gpeer_ok(struct gpeer *p);
/* What every request to a peer sets on its handle: TCP_NODELAY, a
   256 KiB buffer, and http, or https with the group's CA checked. */
void gpeer_wire_opts(const struct tfs_group *g, CURL *h);
/* The signed headers of a request (auth.c) of method for what, with
   "Expect:" (no 100-continue round trip); NULL: no memory. */
struct curl_slist *gpeer_sign(struct tfs_group *g, const char *method,
                              const char *what);

/* "host:port", or "[v6]:port" when host holds a ':'. */
void group_key(char *out, size_t size, const char *host, uint16_t port);

/* The wire: headers of a request and of an answer. */
#define GROUP_PATH "/v1/block/"
#define GROUP_H_TIME "X-Tierfs-Time"
#define GROUP_H_NONCE "X-Tierfs-Nonce"
#define GROUP_H_SIG "X-Tierfs-Signature"
#define GROUP_H_BLOCK "X-Tierfs-Block"
#define GROUP_H_VERSION "X-Tierfs-Version"
#define GROUP_H_SUM "X-Tierfs-Checksum"
#define GROUP_H_SOURCE "X-Tierfs-Source"

/* A PEM file's text (at most 1 MiB), NUL-terminated, tfs_malloc'd;
   private: refused unless mode 0600/0400 and ours (a key). */
int group_read_pem(const char *path, const char *what, bool private,
                   char **out);

/* ---- ckstore.c: the checkpoint copies kept for peers ---- */

#define GCK_PATH "/v1/ckpt/"
#define GCK_NS_LEN 16                   /* lowercase hex digits */
#define GCK_STEP_DIGITS_MAX 20          /* a uint64_t's */
#define GCK_NAME_MAX 200                /* bytes of a file's name */
#define GCK_KEEP_DEFAULT 2              /* steps kept per namespace */

/* What a request names: NS/STEP/NAME, or NS/ (its list). */
struct gck_key {
    char     ns[GCK_NS_LEN + 1];
    char     step[GCK_STEP_DIGITS_MAX + 6];     /* "step-000042" */
    uint64_t step_no;
    char     name[GCK_NAME_MAX + 1];    /* "" for a list */
};

struct gck;                             /* the store: thread-safe */
struct gck_put;                         /* one body on its way: one
                                           thread at a time */

/*
 * Parse path (what follows GCK_PATH) into *k; *is_list for "NS/".
 * -EINVAL with a one-line reason for anything else: the namespace is
 * 16 lowercase hex digits, the step "step-" and 6 to 20 digits as
 * "step-%06" PRIu64 writes them (no other spelling of a number), the
 * name 1-200 bytes of [A-Za-z0-9._-], not starting with '.' and not
 * ending in ".tmp".  So a key never leaves its directory.
 */
int gck_key_parse(const char *path, struct gck_key *k, bool *is_list);

/*
 * Open the copies kept in dir (made 0700 if missing; its parent must
 * exist; refused if another user owns it or may enter it), at most max
 * bytes of them, the keep newest steps per namespace (0: 2).  Scans
 * them once for the bytes kept and removes tmp files a crash left.
 * -errno with the detail naming the directory, -ENOMEM.
 */
int gck_open(const char *dir, uint64_t max, unsigned keep, struct gck **out);
/* After the server stopped: no put, get or list may be running. */
void gck_close(struct gck *s);
/* The bytes kept now, and the files retention has removed. */
void gck_usage(struct gck *s, uint64_t *kept, uint64_t *removed);

/*
 * Start a put of k: len bytes (its Content-Length, reserved under the
 * quota until it ends) that must hash (XXH3-64) to digest.  -EDQUOT
 * "checkpoint copies: N of M bytes used" when they would not fit,
 * -errno naming the file, -ENOMEM.  On success feed the body in order,
 * then end or abort *out.
 */
int gck_put_begin(struct gck *s, const struct gck_key *k, uint64_t len,
                  uint64_t digest, struct gck_put **out);
/* Write and hash the next len bytes: -EBADMSG past len, -errno. */
int gck_put_feed(struct gck_put *p, const void *data, size_t len);
/*
 * Check (length, then digest: -EBADMSG, the reason beginning "checksum
 * mismatch" for the digest), fsync, write the sidecar, rename both into
 * place, fsync the directories; after a manifest (NAME.local) apply the
 * retention.  On failure nothing of p is left.  Frees p either way.
 */
int gck_put_end(struct gck_put *p);
/* Drop p: its tmp file removed, its reservation given back.  NULL: no-op. */
void gck_put_abort(struct gck_put *p);

/*
 * The file of k, open for reading (*fd, the caller's to close), its
 * size and its sidecar's digest, taken together under the lock so they
 * belong to each other.  -ENOENT (it or its sidecar missing; a link is
 * never followed), -EBADMSG (a damaged sidecar), -errno.
 */
int gck_get(struct gck *s, const struct gck_key *k, int *fd, uint64_t *size,
            uint64_t *digest);
/*
 * The list of namespace ns into out (initialised here, the caller's to
 * clean up on success): "tierfs-ckpt-list 1", then "STEP NAME SIZE" for
 * each finished file (with its sidecar), by step number, then name.  A
 * namespace with nothing kept: the first line alone.  -errno, -ENOMEM.
 */
int gck_list(struct gck *s, const char *ns, struct tfs_buf *out);

/* ---- serve.c ---- */
int gserve_start(struct tfs_group *g, struct gserve **out);
uint16_t gserve_port(const struct gserve *s);
void gserve_stop(struct gserve *s);

#endif /* TFS_GROUP_INT_H */
