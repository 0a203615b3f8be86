/* The effective configuration as st_config_print writes it, in a string the
 * caller frees (NULL without memory): for tests that look for a line in it. */
#ifndef ST_TESTS_CONFIG_STRING_H
#define ST_TESTS_CONFIG_STRING_H

#include <stdio.h>

#include "scaletrain/config.h"

static inline char *st_test_config_string(const st_config *c) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
    st_config_print(c, f);
    fclose(f);
    return buf;
}

#endif
