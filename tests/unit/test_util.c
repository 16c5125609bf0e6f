/* SPDX-License-Identifier: MIT */
/*
 * Common helpers: number and size parsing, percent-encoding, byte and hex
 * fields, mountinfo escapes, URIs, option bags and tables, capped buffers,
 * the error space (every code named), the allocation hooks, the hash map
 * and the positional read and write loops.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "test.h"
#include "tierfs/log.h"
#include "tierfs/mem.h"
#include "tierfs/store.h"
#include "common/bytes.h"
#include "common/csum.h"
#include "common/fsutil.h"
#include "common/hmap.h"
#include "common/json.h"
#include "common/util.h"

TEST(sizes)
{
    uint64_t v = 0;

    CHECK_OK(tfs_parse_size("8M", &v));
    CHECK_EQ(v, 8 << 20);
    CHECK_OK(tfs_parse_size("200MB", &v));
    CHECK_EQ(v, 200000000);
    CHECK_OK(tfs_parse_size("1.5GiB", &v));
    CHECK_EQ(v, 3ull << 29);
    CHECK_OK(tfs_parse_size("4096", &v));
    CHECK_EQ(v, 4096);
    CHECK_OK(tfs_parse_size("2k", &v));
    CHECK_EQ(v, 2048);
    CHECK_RC(tfs_parse_size("", &v), TFS_EOPTION);
    CHECK_RC(tfs_parse_size("-1", &v), TFS_EOPTION);
    CHECK_RC(tfs_parse_size("12Q", &v), TFS_EOPTION);
    CHECK_RC(tfs_parse_size("1Mib", &v), TFS_EOPTION);
    CHECK_RC(tfs_parse_size("99999999999T", &v), TFS_EOPTION);
}

TEST(numbers)
{
    uint64_t u = 0;
    double d = 0;
    bool b = false;

    CHECK_OK(tfs_parse_u64("18446744073709551615", &u));
    CHECK(u == UINT64_MAX);
    CHECK_RC(tfs_parse_u64("18446744073709551616", &u), TFS_EOPTION);
    CHECK_RC(tfs_parse_u64("12x", &u), TFS_EOPTION);
    CHECK_OK(tfs_parse_double("0.25", &d));
    CHECK(d == 0.25);
    CHECK_RC(tfs_parse_double("nan", &d), TFS_EOPTION);
    CHECK_OK(tfs_parse_bool("yes", &b));
    CHECK(b);
    CHECK_OK(tfs_parse_bool("0", &b));
    CHECK(!b);
    CHECK_RC(tfs_parse_bool("maybe", &b), TFS_EOPTION);
}

TEST(pct)
{
    struct tfs_buf b;
    char s[] = "a%20b%2Fc%e6%97%a5";

    tfs_buf_init(&b, 0);
    CHECK_OK(tfs_pct_encode(&b, "a b/c~+\xe6", 8, true));
    CHECK_STR(tfs_buf_str(&b), "a%20b/c~%2B%E6");
    tfs_buf_reset(&b);
    CHECK_OK(tfs_pct_encode(&b, "x/y", 3, false));
    CHECK_STR(tfs_buf_str(&b), "x%2Fy");
    tfs_buf_cleanup(&b);
    CHECK_OK(tfs_pct_decode(s));
    CHECK_STR(s, "a b/c\xe6\x97\xa5");
    char bad1[] = "%4";
    char bad2[] = "%zz";
    char nul[] = "a%00b";
    CHECK_RC(tfs_pct_decode(bad1), TFS_EURI);
    CHECK_RC(tfs_pct_decode(bad2), TFS_EURI);
    CHECK_RC(tfs_pct_decode(nul), TFS_EURI);
}

TEST(bytes)
{
    uint8_t b[8];
    const char *hex = "09afAF";

    tfs_put_le16(b, 0x0102);
    CHECK(b[0] == 0x02 && b[1] == 0x01);
    tfs_put_le32(b, 0x01020304u);
    CHECK(b[0] == 0x04 && b[3] == 0x01);
    CHECK_EQ(tfs_get_le32(b), 0x01020304u);
    tfs_put_le64(b, 0x0102030405060708ull);
    CHECK(b[0] == 0x08 && b[7] == 0x01);
    CHECK_EQ(tfs_get_le64(b), 0x0102030405060708ull);
    CHECK_EQ(tfs_get_le16(b), 0x0708);
    CHECK_EQ(tfs_get_le(b, 3), 0x060708);
    for (int i = 0; i < 6; i++)
        CHECK_EQ(tfs_hexval(hex[i]), "\x00\x09\x0a\x0f\x0a\x0f"[i]);
    CHECK_EQ(tfs_hexval('g'), -1);
    CHECK_EQ(tfs_hexval('/'), -1);
    CHECK_EQ(tfs_hexval(-1), -1);
    CHECK_EQ(tfs_hexval_lower('f'), 15);
    CHECK_EQ(tfs_hexval_lower('F'), -1);
}

TEST(mountinfo_unescape)
{
    char s[] = "/mnt/a\\040b\\011c\\012d\\134e";
    char cut[] = "/x\\04";
    char big[] = "\\400\\08\\";

    tfs_mountinfo_unescape(s);
    CHECK_STR(s, "/mnt/a b\tc\nd\\e");
    tfs_mountinfo_unescape(cut);         /* a truncated escape stays */
    CHECK_STR(cut, "/x\\04");
    tfs_mountinfo_unescape(big);         /* not escapes: kept */
    CHECK_STR(big, "\\400\\08\\");
}

TEST(uris)
{
    struct tfs_uri u;

    CHECK_OK(tfs_uri_parse("retry+Fault+s3://bkt/pre%20fix?a=1&b", &u));
    CHECK_EQ(u.n_schemes, 3);
    CHECK_STR(u.schemes[0], "retry");
    CHECK_STR(u.schemes[1], "fault");
    CHECK_STR(u.schemes[2], "s3");
    CHECK_STR(u.location, "bkt/pre fix");
    CHECK_STR(u.query, "a=1&b");
    tfs_uri_cleanup(&u);
    CHECK_OK(tfs_uri_parse("/data/with:colon?x", &u));
    CHECK_EQ(u.n_schemes, 1);
    CHECK_STR(u.schemes[0], "file");
    CHECK_STR(u.location, "/data/with:colon?x");
    CHECK(u.query == NULL);
    tfs_uri_cleanup(&u);
    CHECK_OK(tfs_uri_parse("relative/dir", &u));
    CHECK_STR(u.location, "relative/dir");
    tfs_uri_cleanup(&u);
    CHECK_RC(tfs_uri_parse("", &u), TFS_EURI);
    CHECK_RC(tfs_uri_parse("+s3://b", &u), TFS_EURI);
    CHECK_RC(tfs_uri_parse("a++b://x", &u), TFS_EURI);
    CHECK_RC(tfs_uri_parse("s_3://x", &u), TFS_EURI);
    CHECK_RC(tfs_uri_parse("s3://b/%zz", &u), TFS_EURI);
    CHECK_RC(tfs_uri_parse("a+b+c+d+e+f+g+h+i://x", &u), TFS_EURI);
}

TEST(option_bags)
{
    struct tfs_opts o = {0};

    CHECK_OK(tfs_opts_parse(&o, "a=1&b=two%20words&&flag&a=3"));
    CHECK_EQ(o.n, 3);
    CHECK_STR(tfs_opts_take(&o, "a"), "3");
    CHECK_STR(tfs_opts_take(&o, "b"), "two words");
    CHECK_STR(tfs_opts_unused(&o), "flag");
    CHECK_STR(tfs_opts_take(&o, "flag"), "");
    CHECK(tfs_opts_unused(&o) == NULL);
    CHECK(tfs_opts_take(&o, "missing") == NULL);
    CHECK_RC(tfs_opts_parse(&o, "=x"), TFS_EOPTION);
    CHECK_RC(tfs_opts_parse(&o, "k=%g0"), TFS_EOPTION);
    tfs_opts_cleanup(&o);
}

TEST(capped_buffer)
{
    struct tfs_buf b;
    char *s;

    tfs_buf_init(&b, 10);
    CHECK_OK(tfs_buf_puts(&b, "12345"));
    CHECK_OK(tfs_buf_printf(&b, "%d", 6789));
    CHECK_EQ(b.len, 9);
    CHECK_RC(tfs_buf_puts(&b, "ab"), TFS_ETOOBIG);
    CHECK_EQ(b.len, 9);
    /* the failure sticks: what would still fit is refused too */
    CHECK_RC(tfs_buf_puts(&b, "a"), TFS_ETOOBIG);
    CHECK_RC(tfs_buf_error(&b), TFS_ETOOBIG);
    CHECK_STR(tfs_buf_str(&b), "123456789");
    /* a partial text is never handed out; b starts again */
    CHECK(tfs_buf_steal(&b) == NULL);
    CHECK_EQ(b.len, 0);
    CHECK_OK(tfs_buf_error(&b));
    CHECK_OK(tfs_buf_puts(&b, "a"));
    s = tfs_buf_steal(&b);
    CHECK_STR(s, "a");
    tfs_free(s);
    tfs_buf_cleanup(&b);

    tfs_buf_init(&b, 64);
    CHECK_OK(tfs_json_put_cstr(&b, "q\"\\\n\t"));
    CHECK_STR(tfs_buf_str(&b), "\"q\\\"\\\\\\n\\u0009\"");
    tfs_buf_cleanup(&b);
}

TEST(errors)
{
    CHECK_STR(tfs_strerror(0), "success");
    CHECK_STR(tfs_strerror(-ENOENT), "No such file or directory");
    CHECK_STR(tfs_strerror(TFS_ECHANGED), "object changed in the store");
    CHECK_STR(tfs_strerror(12345), "invalid status");
    CHECK_STR(tfs_errname(TFS_ECORRUPT), "TFS_ECORRUPT");
    CHECK_STR(tfs_errname(-EAGAIN), "EAGAIN");
    CHECK_EQ(tfs_errno(-EACCES), EACCES);
    CHECK_EQ(tfs_errno(TFS_ECHANGED), ESTALE);
    CHECK_EQ(tfs_errno(TFS_ECORRUPT), EIO);
    CHECK(tfs_err_is_retryable(-ETIMEDOUT));
    CHECK(tfs_err_is_retryable(TFS_ESERVER));
    CHECK(!tfs_err_is_retryable(-ENOENT));
    CHECK(!tfs_err_is_retryable(TFS_ECHANGED));
}

/* Every TFS_E* code has a message and a name; one past the last has not. */
TEST(error_range)
{
    int n = 0;

    for (int rc = TFS_ERR_FIRST_; rc > TFS_ERR_LAST_; rc--) {
        if (strcmp(tfs_strerror(rc), "invalid status") == 0 ||
            strncmp(tfs_errname(rc), "TFS_E", 5) != 0 || tfs_errno(rc) <= 0)
            TEST_FAIL_("code %d: \"%s\" %s", rc, tfs_strerror(rc),
                       tfs_errname(rc));
        n++;
    }
    CHECK_EQ(n, TFS_ERR_COUNT_);
    CHECK_EQ(TFS_ERR_LAST_ + 1, TFS_EFORMAT);   /* the last in err.h */
    CHECK_STR(tfs_strerror(TFS_ERR_LAST_), "invalid status");
    CHECK_STR(tfs_errname(TFS_ERR_LAST_), "EINVALID");
    CHECK_STR(tfs_strerror(TFS_ERR_FIRST_ + 1), "invalid status");
}

struct opt_obj {
    bool     b;
    unsigned u;
    uint64_t n;
    uint64_t size;
    uint64_t ms;
    uint64_t ms_ns;
    uint64_t sec_ns;
    double   d;
    char    *str;
    char    *path;
    int      color;
    bool     chosen;
};

/* A custom option: a spelling mapped to a number. */
static int opt_set_color(const struct tfs_opt_spec *o, void *base,
                         const char *value)
{
    struct opt_obj *x = base;

    (void)o;
    if (strcmp(value, "red") == 0)
        x->color = 1;
    else if (strcmp(value, "blue") == 0)
        x->color = 2;
    else
        return TFS_EOPTION;
    return 0;
}

/* A kind's store wrapped: a flag raised only on success. */
static int opt_set_chosen(const struct tfs_opt_spec *o, void *base,
                          const char *value)
{
    int rc = tfs_opt_store(o, base, value);

    if (rc == 0)
        ((struct opt_obj *)base)->chosen = true;
    return rc;
}

#define OPT_(name, kind, field, min, max)                                  \
    {name, kind, offsetof(struct opt_obj, field), min, max, NULL, NULL}

static const struct tfs_opt_spec opt_table[] = {
    OPT_("b", TFS_OPT_BOOL, b, 0, 1),
    OPT_("u", TFS_OPT_UINT, u, 1, 1024),
    OPT_("u_any", TFS_OPT_UINT, u, 0, TFS_OPT_NOMAX),
    OPT_("n", TFS_OPT_U64, n, 0, TFS_OPT_NOMAX),
    {"size", TFS_OPT_SIZE, offsetof(struct opt_obj, size), 64u << 10,
     64u << 20, opt_set_chosen, NULL},
    OPT_("size_min", TFS_OPT_SIZE, size, 1u << 20, TFS_OPT_NOMAX),
    OPT_("size_any", TFS_OPT_SIZE, size, 0, TFS_OPT_NOMAX),
    OPT_("ms", TFS_OPT_MS, ms, 0, 600000),
    OPT_("ms_ns", TFS_OPT_MS_NS, ms_ns, 0, 600000),
    OPT_("sec_ns", TFS_OPT_SEC_NS, sec_ns, 0, 1e7),
    OPT_("d", TFS_OPT_DOUBLE, d, 0, 1),
    OPT_("str", TFS_OPT_STR, str, 0, TFS_OPT_NOMAX),
    OPT_("path", TFS_OPT_STR, path, 1, TFS_OPT_NOMAX),
    {"color", TFS_OPT_CUSTOM, 0, 0, 0, opt_set_color, "red or blue"},
};

static int opt_set(struct opt_obj *x, const char *name, const char *value)
{
    return tfs_opt_apply("test", opt_table, TFS_ARRAY_LEN(opt_table), x,
                         name, value);
}

/* Refused with TFS_EOPTION and exactly this detail; x unchanged. */
#define CHECK_OPT_BAD(x, name, value, detail)                              \
    do {                                                                   \
        struct opt_obj before_ = *(x);                                     \
        CHECK_RC(opt_set(x, name, value), TFS_EOPTION);                    \
        CHECK_STR(tfs_errdetail(), detail);                                \
        CHECK(memcmp(&before_, (x), sizeof(before_)) == 0);                \
    } while (0)

TEST(option_tables)
{
    struct opt_obj x = {0};

    CHECK_OK(opt_set(&x, "b", "yes"));
    CHECK(x.b);
    CHECK_OK(opt_set(&x, "b", "off"));
    CHECK(!x.b);
    CHECK_OK(opt_set(&x, "b", ""));             /* a bare name: true */
    CHECK(x.b);
    CHECK_OPT_BAD(&x, "b", "maybe", "test option b=maybe: expected 0 or 1");
    CHECK_OK(opt_set(&x, "u", "1024"));
    CHECK_EQ(x.u, 1024);
    CHECK_OPT_BAD(&x, "u", "0",
                  "test option u=0: expected a whole number in 1..1024");
    CHECK_OPT_BAD(&x, "u", "1025",
                  "test option u=1025: expected a whole number in 1..1024");
    CHECK_OPT_BAD(&x, "u", "12x",
                  "test option u=12x: expected a whole number in 1..1024");
    CHECK_OK(opt_set(&x, "u_any", "4294967295"));
    CHECK_EQ(x.u, 4294967295u);
    CHECK_OPT_BAD(&x, "u_any", "4294967296",       /* unsigned's bound */
                  "test option u_any=4294967296: expected a whole number "
                  "in 0..4294967295");
    CHECK_OK(opt_set(&x, "n", "18446744073709551615"));
    CHECK(x.n == UINT64_MAX);
    CHECK_OPT_BAD(&x, "n", "-1", "test option n=-1: expected a whole number");
    CHECK_OK(opt_set(&x, "size", "1.5M"));
    CHECK_EQ(x.size, 3u << 19);
    CHECK(x.chosen);
    x.chosen = false;
    CHECK_OPT_BAD(&x, "size", "1K",
                  "test option size=1K: expected a size in 64K..64M");
    CHECK_OPT_BAD(&x, "size", "65M",
                  "test option size=65M: expected a size in 64K..64M");
    CHECK(!x.chosen);
    CHECK_OK(opt_set(&x, "size", "65536"));
    CHECK_OPT_BAD(&x, "size_min", "1023K",
                  "test option size_min=1023K: expected a size of at least "
                  "1M");
    CHECK_OPT_BAD(&x, "size_any", "8Q",
                  "test option size_any=8Q: expected a size such as 8M");
    CHECK_OK(opt_set(&x, "ms", "600000"));
    CHECK_EQ(x.ms, 600000);
    CHECK_OPT_BAD(&x, "ms", "1.5",
                  "test option ms=1.5: expected milliseconds in 0..600000");
    CHECK_OK(opt_set(&x, "ms_ns", "20"));
    CHECK_EQ(x.ms_ns, 20000000u);
    CHECK_OK(opt_set(&x, "sec_ns", "0.25"));
    CHECK_EQ(x.sec_ns, 250000000u);
    CHECK_OPT_BAD(&x, "sec_ns", "-1",
                  "test option sec_ns=-1: expected seconds in 0..1e+07");
    CHECK_OK(opt_set(&x, "d", "0.5"));
    CHECK(x.d == 0.5);
    CHECK_OPT_BAD(&x, "d", "1.5", "test option d=1.5: expected a number in "
                  "0..1");
    CHECK_OK(opt_set(&x, "str", ""));
    CHECK_STR(x.str, "");
    CHECK_OK(opt_set(&x, "str", "two words"));
    CHECK_STR(x.str, "two words");
    CHECK_OPT_BAD(&x, "path", "",
                  "test option path=: expected a non-empty string");
    CHECK(x.path == NULL);
    CHECK_OK(opt_set(&x, "color", "blue"));
    CHECK_EQ(x.color, 2);
    CHECK_OPT_BAD(&x, "color", "green",
                  "test option color=green: expected red or blue");
    CHECK_OPT_BAD(&x, "nope", "1", "unknown test option 'nope'");
    CHECK_OPT_BAD(&x, "u", NULL, "test option u: no value");
    tfs_free(x.str);
}

TEST(deadline)
{
    uint64_t prev = tfs_deadline_set(0);

    CHECK_EQ(tfs_deadline_left_ms(500), 500);
    tfs_deadline_set(tfs_now_ns() + 200000000u);
    CHECK(tfs_deadline_left_ms(0) <= 200 && tfs_deadline_left_ms(0) > 100);
    CHECK(tfs_deadline_left_ms(50) == 50);
    tfs_deadline_set(tfs_now_ns() - 1);
    CHECK_EQ(tfs_deadline_left_ms(500), 0);
    tfs_deadline_set(prev);
}

/* ---- allocation failures: every failing allocation gives -ENOMEM ---- */

static int count_page(void *arg, const struct tfs_list_page *pg)
{
    *(size_t *)arg += pg->n_entries;
    return 0;
}

/* One round of store work; returns the first error. */
static int store_round(const char *root)
{
    struct tfs_store *st = NULL;
    char buf[16];
    size_t n = 0;
    int rc = tfs_store_open(&st, root, "fsync=0");

    if (rc < 0)
        return rc;
    rc = tfs_store_put(st, "d/k1", "hello", 5, NULL);
    if (rc == 0)
        rc = tfs_store_read(st, "d/k1", buf, sizeof(buf), 0, NULL, &n);
    if (rc == 0)
        rc = tfs_store_list_all(st, "", NULL, count_page, &n);
    if (rc == 0)
        rc = tfs_store_list_all(st, "", "/", count_page, &n);
    tfs_store_close(st);
    return rc;
}

TEST(allocation_failures)
{
    char root[] = "/tmp/tfs-mem-XXXXXX";
    int failures = 0;
    int rc;

    CHECK(mkdtemp(root) != NULL);
    CHECK_OK(test_alloc_hook());
    /* Fail the 1st, 2nd, ... allocation until a round needs no more. */
    for (long k = 0; k < 1000; k++) {
        test_alloc_budget(k);
        rc = store_round(root);
        test_alloc_budget(-1);
        if (rc == 0)
            break;
        CHECK_RC(rc, -ENOMEM);
        failures++;
    }
    CHECK(failures > 5);
    CHECK_OK(store_round(root));
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    CHECK(system(cmd) == 0);
}

/* ---- the hash map (common/hmap.c) ---- */

/*
 * Every node in the bucket its hash names, n of them, n <= nb, nb a power
 * of two: what any sequence of inserts, removals and failed doublings
 * must leave.
 */
static void hmap_check(const struct tfs_hmap *m)
{
    size_t n = 0;

    CHECK(m->nb >= 16 && (m->nb & (m->nb - 1)) == 0);
    for (size_t i = 0; i < m->nb; i++) {
        for (const struct tfs_hnode *p = m->b[i]; p != NULL; p = p->next) {
            CHECK_EQ(p->hash & (m->nb - 1), i);
            n++;
        }
    }
    CHECK_EQ(n, m->n);
    CHECK(m->n <= m->nb);
}

#define HMAP_MILLION 1000000

/* A million string keys: found, grown to load 1, removed. */
TEST(hmap_million)
{
    struct tfs_hstr *e = calloc(HMAP_MILLION, sizeof(*e));
    char key[32];
    struct tfs_hmap m;

    CHECK(e != NULL);
    CHECK_OK(tfs_hmap_init(&m, 0, tfs_hstr_eq));
    CHECK_EQ(m.nb, 16);
    for (int i = 0; i < HMAP_MILLION; i++) {
        snprintf(key, sizeof(key), "dir%d/file%d", i % 1000, i);
        e[i].key = strdup(key);
        CHECK(e[i].key != NULL);
        CHECK_OK(tfs_hmap_insert_str(&m, &e[i]));
    }
    CHECK_EQ(tfs_hmap_count(&m), HMAP_MILLION);
    CHECK_EQ(m.nb, 1u << 20);           /* the power of two >= 1M */
    hmap_check(&m);
    for (int i = 0; i < HMAP_MILLION; i++)
        CHECK(tfs_hmap_find_str(&m, e[i].key) == &e[i]);
    CHECK(tfs_hmap_find_str(&m, "dir0/file1") == NULL);
    for (int i = 1; i < HMAP_MILLION; i += 2)
        tfs_hmap_remove(&m, &e[i].node);
    CHECK_EQ(tfs_hmap_count(&m), HMAP_MILLION / 2);
    hmap_check(&m);
    for (int i = 0; i < HMAP_MILLION; i++)
        CHECK(tfs_hmap_find_str(&m, e[i].key) == (i % 2 ? NULL : &e[i]));
    for (int i = 0; i < HMAP_MILLION; i += 2)
        tfs_hmap_remove(&m, &e[i].node);
    CHECK_EQ(tfs_hmap_count(&m), 0);
    hmap_check(&m);
    for (int i = 0; i < HMAP_MILLION; i++)
        free(e[i].key);
    tfs_hmap_cleanup(&m);
    tfs_hmap_cleanup(&m);               /* twice: harmless */
    free(e);
}

/* The inverse of tfs_hash_u64's three steps, to show it is a bijection. */
static uint64_t unxorshift33(uint64_t x)
{
    return x ^ (x >> 33);               /* 33 >= 64 / 2: one step undoes */
}

static uint64_t inverse_odd(uint64_t a)
{
    uint64_t x = a;                     /* right mod 8; each Newton step
                                           doubles the right bits */

    for (int i = 0; i < 6; i++)
        x *= 2 - a * x;
    return x;
}

/* u64 keys: no compare, so the hash must be one to one. */
TEST(hmap_u64)
{
    static struct tfs_hnode nodes[100000];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    struct tfs_hmap m;

    for (int i = 0; i < 1000; i++) {
        uint64_t h;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        h = unxorshift33(tfs_hash_u64(x));
        h = unxorshift33(h * inverse_odd(0xc4ceb9fe1a85ec53ull));
        h = unxorshift33(h * inverse_odd(0xff51afd7ed558ccdull));
        CHECK(h == x);
    }
    CHECK(tfs_hash_u64(1) != tfs_hash_u64(2));
    CHECK_OK(tfs_hmap_init(&m, 1000, NULL));
    CHECK_EQ(m.nb, 1024);
    /* Sequential ids (node ids, as the inode table has) spread. */
    for (uint64_t k = 0; k < 100000; k++)
        CHECK_OK(tfs_hmap_insert_u64(&m, &nodes[k], k + 3));
    hmap_check(&m);
    for (uint64_t k = 0; k < 100000; k++)
        CHECK(tfs_hmap_find_u64(&m, k + 3) == &nodes[k]);
    CHECK(tfs_hmap_find_u64(&m, 2) == NULL);
    CHECK(tfs_hmap_find_u64(&m, 100003) == NULL);
    tfs_hmap_cleanup(&m);
}

/* A node with a key the test compares itself (any hash it likes). */
struct bad_ent {
    struct tfs_hnode node;
    int              key;
    bool             seen;
};

static bool bad_eq(const struct tfs_hnode *n, const void *key)
{
    return tfs_container_of(n, struct bad_ent, node)->key == *(const int *)key;
}

static uint64_t bad_hash(int key)
{
    return (uint64_t)(key % 3) << 40;   /* 3 values, none in the low bits */
}

/* A hash that collides all the time: still right, only slower. */
TEST(hmap_collisions)
{
    static struct bad_ent e[3000];
    struct tfs_hmap m;

    CHECK_OK(tfs_hmap_init(&m, 16, bad_eq));
    for (int i = 0; i < 3000; i++) {
        e[i].key = i;
        CHECK_OK(tfs_hmap_insert(&m, &e[i].node, bad_hash(i)));
    }
    hmap_check(&m);
    CHECK(m.b[0] != NULL);              /* every node in bucket 0 */
    for (int i = 0; i < 3000; i++)
        CHECK(tfs_hmap_find(&m, bad_hash(i), &i) == &e[i].node);
    /* Out of the middle, the head and the tail of the chains. */
    for (int i = 0; i < 3000; i += 7)
        tfs_hmap_remove(&m, &e[i].node);
    tfs_hmap_remove(&m, &e[2999].node);
    hmap_check(&m);
    for (int i = 0; i < 3000; i++) {
        bool gone = i % 7 == 0 || i == 2999;
        CHECK(tfs_hmap_find(&m, bad_hash(i), &i) == (gone ? NULL
                                                          : &e[i].node));
    }
    {
        int absent = 3001;              /* same hash as 1, other key */
        CHECK(tfs_hmap_find(&m, bad_hash(absent), &absent) == NULL);
    }
    tfs_hmap_cleanup(&m);
}

/* A walk sees every node once, and may remove and free the current one. */
TEST(hmap_remove_while_walking)
{
    enum { N = 20000 };
    struct bad_ent **e = calloc(N, sizeof(*e));
    struct tfs_hmap_iter it;
    struct tfs_hnode *n;
    struct tfs_hmap m;
    size_t walked = 0;

    CHECK(e != NULL);
    CHECK_OK(tfs_hmap_init(&m, 0, NULL));
    for (int i = 0; i < N; i++) {
        e[i] = calloc(1, sizeof(**e));
        CHECK(e[i] != NULL);
        e[i]->key = i;
        CHECK_OK(tfs_hmap_insert_u64(&m, &e[i]->node, (uint64_t)i));
    }
    tfs_hmap_iter_init(&it, &m);
    while ((n = tfs_hmap_iter_next(&it)) != NULL) {
        struct bad_ent *b = tfs_container_of(n, struct bad_ent, node);
        CHECK(!b->seen);
        b->seen = true;
        walked++;
        if (b->key % 3 != 0) {          /* two in three go, freed now */
            tfs_hmap_remove(&m, n);
            e[b->key] = NULL;
            free(b);
        }
    }
    CHECK_EQ(walked, N);
    CHECK_EQ(tfs_hmap_count(&m), (N + 2) / 3);
    hmap_check(&m);
    for (int i = 0; i < N; i++)
        CHECK((tfs_hmap_find_u64(&m, (uint64_t)i) != NULL) == (i % 3 == 0));
    /* Empty it while walking: the map is usable and empty after. */
    tfs_hmap_iter_init(&it, &m);
    while ((n = tfs_hmap_iter_next(&it)) != NULL) {
        tfs_hmap_remove(&m, n);
        free(tfs_container_of(n, struct bad_ent, node));
    }
    CHECK_EQ(tfs_hmap_count(&m), 0);
    hmap_check(&m);
    tfs_hmap_iter_init(&it, &m);
    CHECK(tfs_hmap_iter_next(&it) == NULL);
    tfs_hmap_cleanup(&m);
    tfs_hmap_iter_init(&it, &m);        /* a cleaned-up map walks empty */
    CHECK(tfs_hmap_iter_next(&it) == NULL);
    free(e);
}

/*
 * Every allocation failing in turn (the hook above): either init fails
 * (-ENOMEM, an empty map) or a doubling does, and then the insert that
 * needed it returns -ENOMEM, its node is not linked, the map holds just
 * what it held and, memory back, takes the rest.
 */
TEST(hmap_allocation_failures)
{
    enum { N = 5000 };                  /* 16 buckets, then 9 doublings */
    static struct tfs_hnode nodes[N];
    int failures = 0;
    bool failed = true;

    CHECK_OK(test_alloc_hook());
    for (long k = 0; failed && k < 100; k++) {
        struct tfs_hmap m;
        size_t nb = 0;
        int i = 0;
        int rc;

        test_alloc_budget(k);
        rc = tfs_hmap_init(&m, 0, NULL);
        for (; rc == 0 && i < N; i++) {
            nb = m.nb;
            rc = tfs_hmap_insert_u64(&m, &nodes[i], (uint64_t)i);
        }
        test_alloc_budget(-1);
        failed = rc < 0;
        failures += failed;
        if (failed && m.b == NULL) {    /* init */
            CHECK_RC(rc, -ENOMEM);
            CHECK(m.nb == 0 && m.n == 0);
            continue;
        }
        if (failed) {
            CHECK_RC(rc, -ENOMEM);
            i--;                        /* nodes[i] was refused */
            CHECK_EQ(m.nb, nb);
            CHECK_EQ(tfs_hmap_count(&m), i);
        }
        hmap_check(&m);
        for (int j = 0; j < N; j++)
            CHECK((tfs_hmap_find_u64(&m, (uint64_t)j) == &nodes[j]) ==
                  (j < i));
        for (; i < N; i++)
            CHECK_OK(tfs_hmap_insert_u64(&m, &nodes[i], (uint64_t)i));
        hmap_check(&m);
        for (int j = 0; j < N; j++)
            CHECK(tfs_hmap_find_u64(&m, (uint64_t)j) == &nodes[j]);
        tfs_hmap_cleanup(&m);
    }
    CHECK(!failed);
    CHECK_EQ(failures, 10);             /* init and each doubling */
}

/* pwrite all at an offset; pread to the end, short only there; errors. */
TEST(positional_io)
{
    char path[] = "/tmp/tfs-util-io-XXXXXX";
    unsigned char out[10000];
    unsigned char in[12000];
    size_t n = 1;
    int fd = mkstemp(path);

    CHECK(fd >= 0);
    unlink(path);
    for (size_t i = 0; i < sizeof(out); i++)
        out[i] = (unsigned char)(i * 7 + 3);
    CHECK_OK(tfs_pwrite_all(fd, out, sizeof(out), 100));
    CHECK_OK(tfs_pread_full(fd, in, sizeof(out), 100, &n));
    CHECK_EQ(n, sizeof(out));
    CHECK(memcmp(in, out, sizeof(out)) == 0);
    CHECK_OK(tfs_pread_full(fd, in, sizeof(in), 0, &n));
    CHECK_EQ(n, sizeof(out) + 100);     /* the end of the file */
    CHECK(in[0] == 0 && memcmp(in + 100, out, sizeof(out)) == 0);
    CHECK_OK(tfs_pread_full(fd, in, 10, sizeof(out) + 500, &n));
    CHECK_EQ(n, 0);
    CHECK_OK(tfs_pwrite_all(fd, out, 0, 0));
    close(fd);
    CHECK_RC(tfs_pread_full(fd, in, 10, 0, &n), -EBADF);
    CHECK_RC(tfs_pwrite_all(fd, out, 10, 0), -EBADF);
}

/* The chunked digest (common/csum.h): its definition, computed here
 * independently, and the incremental form fed in odd pieces. */
TEST(chunked_digest)
{
    static const size_t lens[] = {0, 1, 65535, 65536, 65537, 3 * 65536,
                                  (1u << 20) + 17};
    size_t max = (1u << 20) + 17;
    uint8_t *data = malloc(max);
    uint8_t *sums = malloc(8 * 20);

    CHECK(data != NULL && sums != NULL);
    for (size_t i = 0; i < max; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 13);
    for (size_t k = 0; k < TFS_ARRAY_LEN(lens); k++) {
        size_t len = lens[k], n = 0, have = 0;
        uint64_t d = 1, want;
        struct tfs_csum s;

        for (size_t off = 0; off < len; off += 65536, n++)
            tfs_put_le64(sums + 8 * n,
                         XXH3_64bits(data + off, TFS_MIN(len - off,
                                                         (size_t)65536)));
        want = XXH3_64bits(sums, 8 * n);
        CHECK_OK(tfs_csum_digest(data, len, &d));
        CHECK_EQ(d, want);
        CHECK_EQ(tfs_csum_of_sums(sums, n), want);
        CHECK_OK(tfs_csum_begin(&s, len));
        while (have < len) {            /* pieces of 1 byte to ~100 KiB */
            have = TFS_MIN(len, have + 1 + (have * 7919 % 100000));
            tfs_csum_feed(&s, data, have);
        }
        CHECK_EQ(tfs_csum_end(&s, data), want);
        tfs_csum_cleanup(&s);
        if (len > 0) {                  /* one flipped bit shows */
            data[len / 2] ^= 0x10;
            CHECK_OK(tfs_csum_digest(data, len, &d));
            CHECK(d != want);
            data[len / 2] ^= 0x10;
        }
    }
    free(sums);
    free(data);
}

/* tfs_xxh3 (the AVX2 build where the CPU has it) gives libxxhash's
 * XXH3_64bits for every length whose code path differs (0-16, 17-128,
 * 129-240, the long loop's stripes and blocks, a tail of any length) and
 * any alignment. */
TEST(xxh3_same_as_library)
{
    size_t max = (1u << 20) + 300;
    uint8_t *data = malloc(max + 64);

    CHECK(data != NULL);
    for (size_t i = 0; i < max + 64; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 11);
    for (size_t len = 0; len <= 2100; len++)
        for (size_t a = 0; a < 3; a++)
            CHECK_EQ(tfs_xxh3(data + a * 7, len),
                     (uint64_t)XXH3_64bits(data + a * 7, len));
    for (size_t len = 2100; len <= max; len = len * 3 / 2 + 13)
        CHECK_EQ(tfs_xxh3(data + 1, len), (uint64_t)XXH3_64bits(data + 1,
                                                                len));
    CHECK_EQ(tfs_xxh3(data, 65536), (uint64_t)XXH3_64bits(data, 65536));
    CHECK_EQ(tfs_xxh3(data, max), (uint64_t)XXH3_64bits(data, max));
    printf("  (tfs_xxh3: %s)\n", tfs_xxh3_is_wide() ? "AVX2" : "library");
    free(data);
}

TESTS(T(sizes), T(numbers), T(pct), T(bytes), T(mountinfo_unescape),
      T(uris), T(option_bags), T(option_tables), T(capped_buffer), T(errors),
      T(error_range), T(deadline), T(allocation_failures), T(hmap_million),
      T(hmap_u64), T(hmap_collisions), T(hmap_remove_while_walking),
      T(hmap_allocation_failures), T(positional_io), T(chunked_digest),
      T(xxh3_same_as_library));
TEST_MAIN()
