/* SPDX-License-Identifier: MIT */
#include "test.h"
#include "common/util.h"

TEST(size)
{
    uint64_t v = 0;
    CHECK_OK(tfs_parse_size("8M", &v));
    CHECK_EQ(v, 8 << 20);
}

TESTS(T(size));
TEST_MAIN()
