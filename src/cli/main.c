/* SPDX-License-Identifier: MIT */
#include <stdio.h>
int main(void)
{
    puts("tierfs: being written");
    return 0;
}
