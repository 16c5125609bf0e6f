# SPDX-License-Identifier: MIT
# -DTFS_SANITIZE=address,undefined builds everything with those sanitizers;
# UBSan findings abort the test that hit them.
if(TFS_SANITIZE)
  add_compile_options(-fsanitize=${TFS_SANITIZE} -fno-omit-frame-pointer
    -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${TFS_SANITIZE})
endif()
