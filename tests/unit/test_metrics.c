/* SPDX-License-Identifier: MIT */
/*
 * The metrics registry (src/metrics/): driven from tfs_metric_registry,
 * so a metric added to any section is checked without a line here.
 *
 *   registry     names, help lines, kinds that fit their types
 *   json         every metric in the JSON with its value and its meta
 *   prometheus   every metric with HELP and TYPE and its value; the
 *                text parses (one sample a line, valid names, unique
 *                families)
 *   cache_api    tfs_cache_stats_json/prometheus: -ENOSPC and *len
 *   docs         docs/metrics.md holds the list the registry makes
 *
 * "./test_metrics --doc" prints that list, to paste into the docs.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <unistd.h>

#include "test.h"
#include "common/json.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "tierfs/cache.h"
#include "tierfs/store.h"

#define MAX_SECTIONS 16
#define DOC_BEGIN "<!-- begin: the registry's list (test_metrics --doc) -->\n"
#define DOC_END "<!-- end of the registry's list -->\n"

static const char test_str[] = "off: \"read-only\" \\ fs";

/* A table section's rows, and their label values as Prometheus shows
   them (escaped). */
#define TEST_ROWS 2
static const char *const test_keys[TEST_ROWS] = {"10.0.0.2:7070",
                                                 "h\"q:1"};
static const char *const test_keys_prom[TEST_ROWS] = {"10.0.0.2:7070",
                                                      "h\\\"q:1"};

/* Snapshots of every section with a distinct value for each metric. */
struct snaps {
    struct tfs_metric_src src[MAX_SECTIONS];
    void                 *data[MAX_SECTIONS];
    struct tfs_hist       hist;         /* 3 values, every HIST metric */
    size_t                n;
};

/* The value metric j of section k holds in the test snapshot. */
static uint64_t want_u64(size_t k, size_t j)
{
    return 1000 * (k + 1) + j;
}

static void snaps_fill(struct snaps *s)
{
    memset(s, 0, sizeof(*s));
    tfs_hist_add(&s->hist, 1000);
    tfs_hist_add(&s->hist, 2000);
    tfs_hist_add(&s->hist, 1000000);
    CHECK(tfs_metric_registry_len <= MAX_SECTIONS);
    for (size_t k = 0; k < tfs_metric_registry_len; k++) {
        const struct tfs_metric_section *sec = tfs_metric_registry[k];
        size_t rows = sec->label != NULL ? TEST_ROWS : 1;
        char *d = calloc(rows, sec->size);

        CHECK(d != NULL);
        for (size_t j = 0; j < sec->n * rows; j++) {
            const struct tfs_metric *m = &sec->m[j % sec->n];
            char *row = d + (j / sec->n) * sec->size;
            uint64_t u = want_u64(k, j % sec->n) + 100000 * (j / sec->n);
            double f = (double)u;
            const char *str = test_str;
            const struct tfs_hist *h = &s->hist;

            if (m->kind == TFS_METRIC_U64)
                memcpy(row + m->off, &u, sizeof(u));
            else if (m->kind == TFS_METRIC_F64)
                memcpy(row + m->off, &f, sizeof(f));
            else if (m->kind == TFS_METRIC_STR)
                memcpy(row + m->off, &str, sizeof(str));
            else
                memcpy(row + m->off, &h, sizeof(h));
        }
        s->data[k] = d;
        s->src[k] = (struct tfs_metric_src){
            .sec = sec, .data = d,
            .keys = sec->label != NULL ? test_keys : NULL,
            .rows = sec->label != NULL ? TEST_ROWS : 0};
        s->n++;
    }
}

static void snaps_free(struct snaps *s)
{
    for (size_t k = 0; k < s->n; k++)
        free(s->data[k]);
}

static bool is_name(const char *s, bool colon)
{
    if (s == NULL || *s == '\0' || isdigit((unsigned char)*s))
        return false;
    for (; *s != '\0'; s++) {
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) ||
              *s == '_' || (colon && (isupper((unsigned char)*s) ||
                                      *s == ':'))))
            return false;
    }
    return true;
}

/* ---- registry ---- */

TEST(registry)
{
    size_t total = 0;

    CHECK(tfs_metric_registry_len >= 6);
    CHECK(tfs_metric_registry[0]->name == NULL);    /* top level first */
    for (size_t k = 0; k < tfs_metric_registry_len; k++) {
        const struct tfs_metric_section *sec = tfs_metric_registry[k];

        CHECK(sec->n > 0 && sec->m != NULL && sec->size > 0);
        CHECK(sec->when != NULL && sec->prom_prefix != NULL);
        CHECK(k == 0 || (is_name(sec->name, false) &&
                         strcmp(sec->name, "meta") != 0));
        for (size_t i = 0; i < k; i++)
            CHECK(tfs_metric_registry[i] != sec);
        for (size_t j = 0; j < sec->n; j++) {
            const struct tfs_metric *m = &sec->m[j];

            if (!is_name(m->name, false))
                TEST_FAIL_("metric name '%s'", m->name);
            CHECK(m->prom == NULL || is_name(m->prom, true));
            CHECK(m->help != NULL && m->help[0] != '\0');
            CHECK(strpbrk(m->help, "\n\\") == NULL);
            CHECK((m->kind == TFS_METRIC_HIST) ==
                  (m->type == TFS_METRIC_SUMMARY));
            CHECK((m->kind == TFS_METRIC_STR) ==
                  (m->type == TFS_METRIC_INFO));
            CHECK(m->off < sec->size);
            for (size_t i = 0; i < j; i++)
                CHECK(strcmp(sec->m[i].name, m->name) != 0);
            total++;
        }
    }
    printf("    %zu metrics in %zu sections\n", total,
           tfs_metric_registry_len);
}

/* ---- json ---- */

/* Check one metric's members in obj and their meta entries. */
static void json_check_metric(const struct tfs_json *obj,
                              const struct tfs_json *meta,
                              const struct tfs_metric_section *sec,
                              size_t k, size_t j, size_t row)
{
    const struct tfs_metric *m = &sec->m[j];
    struct tfs_metric_field f[TFS_METRIC_FIELDS_MAX];
    size_t nf = tfs_metric_fields(m, f);
    char key[160];

    for (size_t i = 0; i < nf; i++) {
        const struct tfs_json *v;
        const struct tfs_json *mt;
        uint64_t u = 0;

        snprintf(key, sizeof(key), "%s%s", m->name, f[i].suffix);
        v = tfs_json_get(obj, key);
        if (v == NULL)
            TEST_FAIL_("%s: no JSON member %s", sec->prom_prefix, key);
        if (m->kind == TFS_METRIC_STR) {
            CHECK_STR(tfs_json_str(v), test_str);
        } else if (m->kind == TFS_METRIC_HIST) {
            CHECK(v->type == TFS_JSON_NUMBER);
            CHECK(i > 0 || (tfs_json_u64(v, &u) == 0 && u == 3));
        } else {
            CHECK(v->type == TFS_JSON_NUMBER);
            uint64_t want = want_u64(k, j) + 100000 * row;

            if (strtod(v->s, NULL) != (double)want)
                TEST_FAIL_("%s = %s, want %" PRIu64, key, v->s, want);
        }
        snprintf(key, sizeof(key), "%s%s%s%s", sec->name ? sec->name : "",
                 sec->name == NULL ? "" : sec->label != NULL ? ".*." : ".",
                 m->name, f[i].suffix);
        mt = tfs_json_get(meta, key);
        if (mt == NULL || mt->type != TFS_JSON_ARRAY || mt->n != 2)
            TEST_FAIL_("meta lacks %s", key);
        CHECK_STR(tfs_json_str(mt->child), tfs_metric_type_name(f[i].type));
        CHECK_STR(tfs_json_str(mt->child->next),
                  tfs_metric_unit_name(f[i].unit));
    }
}

TEST(json)
{
    struct snaps s;
    struct tfs_buf b;
    struct tfs_json_doc doc;
    const struct tfs_json *meta;
    size_t members = 0;
    size_t named = 0;

    snaps_fill(&s);
    tfs_buf_init(&b, 1u << 20);
    CHECK_OK(tfs_metrics_json(&b, s.src, s.n));
    CHECK_OK(tfs_json_parse(b.p, b.len, NULL, &doc));
    CHECK(doc.root->type == TFS_JSON_OBJECT);
    meta = tfs_json_get(doc.root, "meta");
    CHECK(meta != NULL && meta->type == TFS_JSON_OBJECT);
    for (size_t k = 0; k < s.n; k++) {
        const struct tfs_metric_section *sec = s.src[k].sec;
        const struct tfs_json *obj = sec->name
                                         ? tfs_json_get(doc.root, sec->name)
                                         : doc.root;
        struct tfs_metric_field f[TFS_METRIC_FIELDS_MAX];
        size_t want = 0;

        CHECK(obj != NULL && obj->type == TFS_JSON_OBJECT);
        for (size_t j = 0; j < sec->n; j++)
            want += tfs_metric_fields(&sec->m[j], f);
        for (size_t row = 0; sec->label != NULL && row < TEST_ROWS; row++) {
            const struct tfs_json *r = tfs_json_get(obj, test_keys[row]);

            CHECK(r != NULL && r->type == TFS_JSON_OBJECT);
            for (size_t j = 0; j < sec->n; j++)
                json_check_metric(r, meta, sec, k, j, row);
            CHECK_EQ(r->n, want);       /* nothing unregistered */
        }
        for (size_t j = 0; sec->label == NULL && j < sec->n; j++)
            json_check_metric(obj, meta, sec, k, j, 0);
        members += want;
        if (sec->label != NULL)
            CHECK_EQ(obj->n, TEST_ROWS);
        else if (sec->name != NULL)
            CHECK_EQ(obj->n, want);     /* nothing unregistered */
        else
            named = want;
    }
    /* The top level: its metrics, one object per named section, meta. */
    CHECK_EQ(doc.root->n, named + (s.n - 1) + 1);
    CHECK_EQ(meta->n, members);
    tfs_json_cleanup(&doc);
    tfs_buf_cleanup(&b);
    snaps_free(&s);
}

/* ---- prometheus ---- */

struct prom_family {
    char name[128];
    char type[16];
    bool help;
};

struct prom_text {
    struct prom_family f[512];
    size_t             n;
};

static struct prom_family *prom_find(struct prom_text *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++) {
        if (strcmp(t->f[i].name, name) == 0)
            return &t->f[i];
    }
    return NULL;
}

/* Labels {k="v",...} at p; past them, or NULL when malformed. */
static const char *prom_labels(const char *p)
{
    if (*p != '{')
        return p;
    p++;
    while (*p != '}') {
        const char *k = p;
        while (isalnum((unsigned char)*p) || *p == '_')
            p++;
        if (p == k || p[0] != '=' || p[1] != '"')
            return NULL;
        for (p += 2; *p != '"'; p++) {
            if (*p == '\0' || *p == '\n')
                return NULL;
            if (*p == '\\' && strchr("\\\"n", p[1]) == NULL)
                return NULL;
            p += *p == '\\';
        }
        p++;
        if (*p == ',')
            p++;
        else if (*p != '}')
            return NULL;
    }
    return p + 1;
}

/* One sample line: a valid name with a TYPE before it, a number. */
static void prom_sample(struct prom_text *t, const char *line)
{
    char name[128];
    const char *p = line;
    char *end;
    size_t len;
    struct prom_family *f;

    while (isalnum((unsigned char)*p) || *p == '_' || *p == ':')
        p++;
    len = (size_t)(p - line);
    CHECK(len > 0 && len < sizeof(name));
    memcpy(name, line, len);
    name[len] = '\0';
    CHECK(is_name(name, true));
    f = prom_find(t, name);
    if (f == NULL && len > 4 && strcmp(name + len - 4, "_sum") == 0)
        name[len - 4] = '\0';
    else if (f == NULL && len > 6 && strcmp(name + len - 6, "_count") == 0)
        name[len - 6] = '\0';
    f = f ? f : prom_find(t, name);
    if (f == NULL || f->type[0] == '\0')
        TEST_FAIL_("sample without a TYPE: %s", line);
    p = prom_labels(p);
    if (p == NULL || *p != ' ')
        TEST_FAIL_("bad sample: %s", line);
    (void)strtod(p + 1, &end);
    if (end == p + 1 || *end != '\0')
        TEST_FAIL_("bad value: %s", line);
}

/* Parse the whole text line by line into t. */
static void prom_parse(char *text, struct prom_text *t)
{
    char *next;

    CHECK(text[0] != '\0' && text[strlen(text) - 1] == '\n');
    t->n = 0;
    for (char *l = text; *l != '\0'; l = next) {
        char name[128];
        char word[64];
        struct prom_family *f;
        bool help = strncmp(l, "# HELP ", 7) == 0;

        next = strchr(l, '\n');
        *next++ = '\0';
        CHECK(l[0] != '\0');           /* no empty lines */
        if (!help && strncmp(l, "# TYPE ", 7) != 0) {
            CHECK(l[0] != '#' && l[0] != ' ');
            prom_sample(t, l);
            continue;
        }
        CHECK(sscanf(l + 7, "%127s %63s", name, word) == 2);
        CHECK(is_name(name, true));
        f = prom_find(t, name);
        if (f == NULL) {
            CHECK(t->n < TFS_ARRAY_LEN(t->f));
            f = &t->f[t->n++];
            memset(f, 0, sizeof(*f));
            snprintf(f->name, sizeof(f->name), "%s", name);
        }
        if (help) {
            CHECK(!f->help);            /* one HELP a family */
            f->help = true;
        } else {
            CHECK(f->type[0] == '\0');  /* one TYPE a family */
            snprintf(f->type, sizeof(f->type), "%.15s", word);
        }
    }
}

/* The sample line of name (with labels, if given) in text. */
static const char *prom_value(const char *text, const char *name,
                              const char *labels)
{
    char pat[512];
    const char *p;

    snprintf(pat, sizeof(pat), "\n%s%s ", name, labels);
    p = strstr(text, pat);
    return p ? p + strlen(pat) : NULL;
}

static void prom_check_metric(const char *text, struct prom_text *t,
                              const struct tfs_metric_section *sec,
                              size_t k, size_t j, size_t row)
{
    const struct tfs_metric *m = &sec->m[j];
    char name[128];
    char sub[160];
    char lab[96] = "";                  /* the row's label, and a comma */
    char ls[192];
    struct prom_family *f;
    const char *v;
    uint64_t want = want_u64(k, j) + 100000 * row;

    if (sec->label != NULL)
        snprintf(lab, sizeof(lab), "%s=\"%s\"", sec->label,
                 test_keys_prom[row]);

    CHECK_OK(tfs_metric_prom_name(sec, m, name, sizeof(name)));
    f = prom_find(t, name);
    if (f == NULL || !f->help || f->type[0] == '\0')
        TEST_FAIL_("%s (%s) lacks HELP or TYPE", name, m->name);
    CHECK_STR(f->type, m->type == TFS_METRIC_INFO
                           ? "gauge" : tfs_metric_type_name(m->type));
    if (m->kind == TFS_METRIC_HIST) {
        snprintf(ls, sizeof(ls), "{%s%squantile=\"0.5\"}", lab,
                 lab[0] ? "," : "");
        CHECK(prom_value(text, name, ls) != NULL);
        snprintf(ls, sizeof(ls), "{%s%squantile=\"0.99\"}", lab,
                 lab[0] ? "," : "");
        CHECK(prom_value(text, name, ls) != NULL);
        snprintf(ls, sizeof(ls), lab[0] ? "{%s}" : "%s", lab);
        snprintf(sub, sizeof(sub), "%s_count", name);
        v = prom_value(text, sub, ls);
        CHECK(v != NULL && strtoull(v, NULL, 10) == 3);
        snprintf(sub, sizeof(sub), "%s_sum", name);
        v = prom_value(text, sub, ls);
        CHECK(v != NULL && fabs(strtod(v, NULL) - 0.001003) < 1e-9);
    } else if (m->kind == TFS_METRIC_STR) {
        snprintf(ls, sizeof(ls),
                 "{%s%svalue=\"off: \\\"read-only\\\" \\\\ fs\"}", lab,
                 lab[0] ? "," : "");
        v = prom_value(text, name, ls);
        CHECK(v != NULL && strtod(v, NULL) == 1);
    } else {
        snprintf(ls, sizeof(ls), lab[0] ? "{%s}" : "%s", lab);
        v = prom_value(text, name, ls);
        if (v == NULL || strtod(v, NULL) != (double)want)
            TEST_FAIL_("%s%s: no sample of %" PRIu64, name, ls, want);
    }
}

TEST(prometheus)
{
    static struct prom_text t;
    struct snaps s;
    struct tfs_buf b;
    char *copy;
    size_t metrics = 0;

    snaps_fill(&s);
    tfs_buf_init(&b, 1u << 20);
    CHECK_OK(tfs_metrics_prometheus(&b, s.src, s.n));
    copy = strdup(b.p);
    CHECK(copy != NULL);
    prom_parse(copy, &t);
    free(copy);
    for (size_t k = 0; k < s.n; k++) {
        size_t rows = s.src[k].sec->label != NULL ? TEST_ROWS : 1;

        for (size_t row = 0; row < rows; row++) {
            for (size_t j = 0; j < s.src[k].sec->n; j++)
                prom_check_metric(b.p, &t, s.src[k].sec, k, j, row);
        }
        metrics += s.src[k].sec->n;
    }
    CHECK_EQ(t.n, metrics);             /* nothing unregistered */
    tfs_buf_cleanup(&b);
    snaps_free(&s);
}

/* ---- the C API ---- */

TEST(cache_api)
{
    char dir[] = "/tmp/tfs-metrics-XXXXXX";
    char uri[64];
    char buf[16];
    char *big;
    struct tfs_store *st = NULL;
    struct tfs_cache *c = NULL;
    struct tfs_json_doc doc;
    size_t len = 0;
    size_t len2 = 0;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(uri, sizeof(uri), "file://%s", dir);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    CHECK_OK(tfs_cache_create(&c));
    CHECK_OK(tfs_cache_open(c, st));
    CHECK_RC(tfs_cache_stats_json(c, NULL, 0, &len), -ENOSPC);
    CHECK(len > 100);
    CHECK_RC(tfs_cache_stats_json(c, buf, sizeof(buf), &len2), -ENOSPC);
    CHECK(strlen(buf) == sizeof(buf) - 1 && buf[0] == '{');
    big = malloc(len + 64);
    CHECK(big != NULL);
    CHECK_OK(tfs_cache_stats_json(c, big, len + 64, &len2));
    CHECK(len2 == strlen(big));
    CHECK_OK(tfs_json_parse(big, len2, NULL, &doc));
    CHECK(tfs_json_get(doc.root, "read_bytes") != NULL);
    CHECK(tfs_json_get(tfs_json_get(doc.root, "meta"), "read_bytes"));
    CHECK(tfs_json_get(doc.root, "fuse") == NULL);  /* the cache alone */
    tfs_json_cleanup(&doc);
    CHECK_RC(tfs_cache_stats_prometheus(c, NULL, 0, &len), -ENOSPC);
    big = realloc(big, len + 64);
    CHECK(big != NULL);
    CHECK_OK(tfs_cache_stats_prometheus(c, big, len + 64, &len2));
    CHECK(len2 == strlen(big));
    CHECK(strstr(big, "\ntierfs_read_bytes_total 0\n") != NULL);
    free(big);
    tfs_cache_close(c);
    tfs_store_close(st);
    rmdir(dir);
}

/* ---- docs ---- */

static void doc_row(struct tfs_buf *b, const struct tfs_metric_section *sec,
                    const struct tfs_metric *m)
{
    char prom[128] = "?";

    (void)tfs_metric_prom_name(sec, m, prom, sizeof(prom));
    if (m->type == TFS_METRIC_SUMMARY)
        tfs_buf_printf(b, "| `%s_{count,p50_us,p95_us,p99_us}` ", m->name);
    else
        tfs_buf_printf(b, "| `%s` ", m->name);
    tfs_buf_printf(b, "| `%s` | %s | %s | %s |\n", prom,
                   tfs_metric_type_name(m->type),
                   tfs_metric_unit_name(m->unit), m->help);
}

/* The registry as the markdown docs/metrics.md holds. */
static void doc_render(struct tfs_buf *b)
{
    tfs_buf_puts(b, DOC_BEGIN);
    for (size_t k = 0; k < tfs_metric_registry_len; k++) {
        const struct tfs_metric_section *sec = tfs_metric_registry[k];

        tfs_buf_printf(b, "\n### %s%s%s\n\n", sec->name ? "`" : "",
                       sec->name ? sec->name : "The cache (top level)",
                       sec->name ? "`" : "");
        tfs_buf_printf(b, "Present in %s.\n\n", sec->when);
        tfs_buf_puts(b, "| JSON | Prometheus | type | unit | meaning |\n"
                        "|---|---|---|---|---|\n");
        for (size_t j = 0; j < sec->n; j++)
            doc_row(b, sec, &sec->m[j]);
    }
    tfs_buf_puts(b, "\n" DOC_END);
}

TEST(docs)
{
    char path[] = TFS_SOURCE_DIR "/docs/metrics.md";
    struct tfs_buf want;
    struct tfs_buf have;
    char chunk[4096];
    const char *begin;
    const char *end;
    FILE *f = fopen(path, "r");
    size_t n;

    CHECK(f != NULL);
    tfs_buf_init(&have, 1u << 20);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        CHECK_OK(tfs_buf_append(&have, chunk, n));
    fclose(f);
    tfs_buf_init(&want, 1u << 20);
    doc_render(&want);
    CHECK_OK(tfs_buf_error(&want));
    begin = strstr(tfs_buf_str(&have), DOC_BEGIN);
    end = begin ? strstr(begin, DOC_END) : NULL;
    if (end == NULL ||
        (size_t)(end + strlen(DOC_END) - begin) != want.len ||
        memcmp(begin, want.p, want.len) != 0)
        TEST_FAIL_("%s: the list differs from the registry; replace it "
                   "with the output of test_metrics --doc", path);
    tfs_buf_cleanup(&want);
    tfs_buf_cleanup(&have);
}

TESTS(T(registry), T(json), T(prometheus), T(cache_api), T(docs));

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--doc") == 0) {
        struct tfs_buf b;

        tfs_buf_init(&b, 1u << 20);
        doc_render(&b);
        fwrite(b.p, 1, b.len, stdout);
        tfs_buf_cleanup(&b);
        return 0;
    }
    return test_run(test_cases, TFS_ARRAY_LEN(test_cases), argc, argv);
}
