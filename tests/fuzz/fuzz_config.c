/* libFuzzer target for the run configuration (the YAML file a user writes,
 * then `--set` on top of it): any bytes must load into a configuration or
 * give a clean error naming the file; never a crash, a read outside the
 * text, a leak, or an undefined conversion of a number. A configuration that
 * loads is validated, described key by key and printed, as `train` does. Built by
 * `make fuzz` (clang); see tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_schema.h"
#include "fuzz_file.h"
#include "scaletrain/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_config c;
    st_config_defaults(&c);
    if (st_config_load(&c, fuzz_file(data, size)) == ST_OK) {
        (void)st_config_apply_preset(&c);
        (void)st_config_validate(&c);
        char buf[512];
        for (int i = 0; i < st_cfg_nkeys; i++)
            (void)st_config_describe(&c, st_cfg_keys[i].key, buf, sizeof buf);
        FILE *sink = fopen("/dev/null", "w");
        if (!sink) abort();
        st_config_print(&c, sink);
        fclose(sink);
        free(st_config_to_json(&c));
    }
    /* the same text, one line at a time, as --set key=value */
    char line[256];
    size_t at = 0;
    for (int lines = 0; at < size && lines < 8; lines++) {
        size_t n = 0;
        while (at < size && data[at] != '\n' && n + 1 < sizeof line)
            line[n++] = (char)data[at++];
        while (at < size && data[at] != '\n')
            at++;
        at++;
        line[n] = '\0';
        if (memchr(line, '\0', n)) continue;
        (void)st_config_set(&c, line);
    }
    return 0;
}
