/* SPDX-License-Identifier: MIT */
/*
 * tierfs version: this build and the libraries it runs with.
 */
#include <curl/curl.h>
#include <expat.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "tierfs/api.h"

int cmd_version(int argc, char **argv)
{
    const curl_version_info_data *cv = curl_version_info(CURLVERSION_NOW);

    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        printf("usage: tierfs version\n\nPrint the version of tierfs and "
               "of the libraries it uses.\n");
        return CLI_OK;
    }
    if (argc > 1 && strcmp(argv[1], "--version") != 0)
        return cli_usage_error("version", "takes no arguments");
    printf("tierfs %s (abi %d)\n", TFS_VERSION_STRING, TFS_ABI_VERSION);
    printf("libcurl %s, %s, %s\n", cv->version,
           XML_ExpatVersion(), OpenSSL_version(OPENSSL_VERSION));
    return CLI_OK;
}
