# SPDX-License-Identifier: MIT
# The warning set every tierfs target builds with; warnings are errors.
function(tfs_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Werror -Wpedantic -Wshadow -Wstrict-prototypes
    -Wmissing-prototypes -Wno-unused-parameter -Wformat=2
    -Wno-format-nonliteral)
endfunction()
