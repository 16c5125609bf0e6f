/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the two parsers of checkpoint copies on peers:
 * the member's key ("NS/STEP/NAME" or "NS/", from the request path,
 * src/group/ckstore.c) and the writer's reading of a member's list
 * (src/ckpt/peer.c).  The first byte picks one.  Invariants: a key that
 * parses is 16 hex digits, a step that tfs_ckpt_step_name spells the
 * same way, and a plain name (no '/', no leading dot), and joined again
 * it is the input; a list's newest step is the largest that a line of it
 * names with the rank's manifest.  No crash, no leak.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_int.h"
#include "group/group_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_key(const char *s)
{
    struct gck_key k;
    bool list = false;
    char step[32];
    char back[512];

    if (gck_key_parse(s, &k, &list) != 0)
        return;
    for (size_t i = 0; i < 16; i++)
        if (!((k.ns[i] >= '0' && k.ns[i] <= '9') ||
              (k.ns[i] >= 'a' && k.ns[i] <= 'f')))
            abort();
    if (list) {
        snprintf(back, sizeof(back), "%s/", k.ns);
    } else {
        tfs_ckpt_step_name(step, sizeof(step), k.step_no);
        if (strcmp(step, k.step) != 0 || k.name[0] == '.' ||
            k.name[0] == '\0' || strchr(k.name, '/') != NULL)
            abort();
        snprintf(back, sizeof(back), "%s/%s/%s", k.ns, k.step, k.name);
    }
    if (strcmp(back, s) != 0)
        abort();
}

static void check_list(const char *s)
{
    static const char name[] = "rank-00001.local";
    uint64_t step = 0;
    bool named = false;
    int rc = tfs_ckpt_peer_newest(s, name, &step);

    if (rc <= 0)
        return;
    /* The step found is the largest on a line with that name. */
    for (const char *p = strchr(s, '\n'); p != NULL && p[1] != '\0';
         p = strchr(p + 1, '\n')) {
        const char *sp = strchr(p + 1, ' ');
        uint64_t v;

        if (sp == NULL || strncmp(sp + 1, name, sizeof(name) - 1) != 0 ||
            sp[sizeof(name)] != ' ' ||
            !tfs_ckpt_step_parse(p + 1, (size_t)(sp - p - 1), &v))
            continue;
        if (v > step)
            abort();
        named = named || v == step;
    }
    if (!named)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s;

    if (size < 1 || size > 4096)
        return 0;
    s = malloc(size);
    if (s == NULL)
        return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    if (strlen(s) == size - 1) {        /* NUL-terminated, as both see */
        if (data[0] & 1)
            check_list(s);
        else
            check_key(s);
    }
    free(s);
    return 0;
}
