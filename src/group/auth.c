/* SPDX-License-Identifier: MIT */
/*
 * Peer request authentication (group.h): HMAC-SHA256 with the group
 * secret over "METHOD\nBLOCK\nTIME\nNONCE", a time window against the
 * receiver's clock, and the nonces seen within the window kept so a
 * request cannot be replayed.  Nonces expire oldest first (a FIFO beside
 * the hash map), when their time has left the window.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/util.h"
#include "group/group.h"

struct gauth_nonce {
    struct tfs_hstr     h;              /* first; key is text[] */
    struct gauth_nonce *next;           /* FIFO */
    uint64_t            time_s;
    char                text[TFS_GAUTH_NONCE_MAX + 1];
};

int tfs_gauth_init(struct tfs_gauth *a, const void *secret, size_t len,
                   uint64_t window_s)
{
    int rc;

    memset(a, 0, sizeof(*a));
    if (len < TFS_GAUTH_SECRET_MIN || len > TFS_GAUTH_SECRET_MAX)
        return tfs_err(-EINVAL, "group secret of %zu bytes: it takes "
                       "%d..%d", len, TFS_GAUTH_SECRET_MIN,
                       TFS_GAUTH_SECRET_MAX);
    rc = tfs_hmap_init(&a->seen, 0, tfs_hstr_eq);
    if (rc < 0)
        return rc;
    memcpy(a->key, secret, len);
    a->key_len = len;
    a->window_s = window_s;
    pthread_mutex_init(&a->lock, NULL);
    return 0;
}

int tfs_gauth_load(struct tfs_gauth *a, const char *path, uint64_t window_s)
{
    unsigned char buf[TFS_GAUTH_SECRET_MAX + 2];
    struct stat sb;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    int rc;

    if (fd < 0)
        return tfs_err(-errno, "cannot open the group secret %s", path);
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return tfs_err(-EINVAL, "group secret %s is not a file", path);
    }
    if (sb.st_uid != geteuid() || (sb.st_mode & 077) != 0) {
        close(fd);
        return tfs_err(-EPERM, "group secret %s may be read by others "
                       "(mode %03o, owner %u): make it 0600 and yours",
                       path, (unsigned)(sb.st_mode & 0777),
                       (unsigned)sb.st_uid);
    }
    n = read(fd, buf, sizeof(buf));
    rc = n < 0 ? -errno : 0;
    close(fd);
    if (rc < 0)
        return tfs_err(rc, "cannot read the group secret %s", path);
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    rc = tfs_gauth_init(a, buf, (size_t)n, window_s);
    OPENSSL_cleanse(buf, sizeof(buf));
    if (rc < 0) {
        char why[256];

        snprintf(why, sizeof(why), "%s", tfs_errdetail());
        return tfs_err(rc, "group secret %s: %s", path, why);
    }
    return 0;
}

void tfs_gauth_cleanup(struct tfs_gauth *a)
{
    struct gauth_nonce *n = a->head;

    while (n != NULL) {
        struct gauth_nonce *next = n->next;
        tfs_free(n);
        n = next;
    }
    a->head = a->tail = NULL;
    tfs_hmap_cleanup(&a->seen);
    if (a->key_len > 0)
        pthread_mutex_destroy(&a->lock);
    OPENSSL_cleanse(a->key, sizeof(a->key));
    a->key_len = 0;
}

void tfs_gauth_sign(const struct tfs_gauth *a, const char *method,
                    const char *block, uint64_t time_s, const char *nonce,
                    char sig[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned md_len = 0;
    char msg[1024];
    int n = snprintf(msg, sizeof(msg), "%s\n%s\n%" PRIu64 "\n%s", method,
                     block, time_s, nonce);

    if (n < 0 || (size_t)n >= sizeof(msg))
        n = 0;                          /* too long: signs "", never
                                           matches a real request */
    HMAC(EVP_sha256(), a->key, (int)a->key_len, (const unsigned char *)msg,
         (size_t)n, md, &md_len);
    tfs_hex_lower(sig, md, 32);
}

static bool gauth_nonce_ok(const char *nonce)
{
    size_t len = strlen(nonce);

    if (len < TFS_GAUTH_NONCE_MIN || len > TFS_GAUTH_NONCE_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (tfs_hexval_lower(nonce[i]) < 0)
            return false;
    return true;
}

/* Forget the nonces whose time has left the window.  a->lock held. */
static void gauth_expire(struct tfs_gauth *a, uint64_t now_s)
{
    while (a->head != NULL && a->head->time_s + a->window_s < now_s) {
        struct gauth_nonce *n = a->head;
        a->head = n->next;
        if (a->head == NULL)
            a->tail = NULL;
        tfs_hmap_remove(&a->seen, &n->h.node);
        tfs_free(n);
    }
}

/* Remember nonce (new) at time_s.  a->lock held. */
static int gauth_remember(struct tfs_gauth *a, const char *nonce,
                          uint64_t time_s)
{
    struct gauth_nonce *n;
    int rc;

    if (tfs_hmap_count(&a->seen) >= TFS_GAUTH_SEEN_MAX)
        return tfs_err(-EAGAIN, "group: %u requests within the window "
                       "already", TFS_GAUTH_SEEN_MAX);
    n = tfs_calloc(1, sizeof(*n));
    if (n == NULL)
        return -ENOMEM;
    snprintf(n->text, sizeof(n->text), "%s", nonce);
    n->h.key = n->text;
    n->time_s = time_s;
    rc = tfs_hmap_insert_str(&a->seen, &n->h);
    if (rc < 0) {
        tfs_free(n);
        return rc;
    }
    if (a->tail != NULL)
        a->tail->next = n;
    else
        a->head = n;
    a->tail = n;
    return 0;
}

int tfs_gauth_check(struct tfs_gauth *a, const char *method,
                    const char *block, uint64_t time_s, const char *nonce,
                    const char *sig, uint64_t now_s)
{
    uint64_t skew = time_s > now_s ? time_s - now_s : now_s - time_s;
    char want[65];
    int rc = 0;

    if (!gauth_nonce_ok(nonce))
        return tfs_err(-EACCES, "group request refused: the nonce is not "
                       "%d..%d lowercase hex digits", TFS_GAUTH_NONCE_MIN,
                       TFS_GAUTH_NONCE_MAX);
    if (skew > a->window_s)
        return tfs_err(-EACCES, "group request refused: its time is %" PRIu64
                       " s off this node's clock (the window is %" PRIu64
                       " s)", skew, a->window_s);
    tfs_gauth_sign(a, method, block, time_s, nonce, want);
    if (strlen(sig) != 64 || CRYPTO_memcmp(want, sig, 64) != 0)
        return tfs_err(-EACCES, "group request refused: bad signature "
                       "(another group secret?)");
    pthread_mutex_lock(&a->lock);
    gauth_expire(a, now_s);
    if (tfs_hmap_find_str(&a->seen, nonce) != NULL)
        rc = tfs_err(-EACCES, "group request refused: nonce %s was used "
                     "already (a replay)", nonce);
    else
        rc = gauth_remember(a, nonce, time_s);
    pthread_mutex_unlock(&a->lock);
    return rc;
}
