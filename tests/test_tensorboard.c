/* TensorBoard event files: CRC-32C against published vectors (RFC 3720
 * B.4 and the usual check value), the TFRecord mask, and the framing of a
 * written file (every length and CRC checked, the version record first, the
 * START record, one scalar event decoded by hand), and metrics.jsonl's
 * numbers reading back as exactly the values the event file holds as float32.
 * TensorBoard's own reader reads whole runs in tests/py/test_tensorboard.py. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "train/metrics.h"
#include "train/tensorboard.h"

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void crc_vectors(void) {
    uint8_t buf[32];
    CHECK(st_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c(123456789) = %08x", st_crc32c(0, "123456789", 9));
    memset(buf, 0, sizeof buf);
    CHECK(st_crc32c(0, buf, 32) == 0x8A9136AAu, "32 zeros: %08x", st_crc32c(0, buf, 32));
    memset(buf, 0xff, sizeof buf);
    CHECK(st_crc32c(0, buf, 32) == 0x62A8AB43u, "32 x ff: %08x", st_crc32c(0, buf, 32));
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    CHECK(st_crc32c(0, buf, 32) == 0x46DD794Eu, "0..31: %08x", st_crc32c(0, buf, 32));
    CHECK(st_crc32c(st_crc32c(0, buf, 10), buf + 10, 22) == 0x46DD794Eu, "continued crc");
    CHECK(st_crc32c(0, "", 0) == 0, "empty");
    const uint32_t c = 0xE3069283u;
    CHECK(st_tb_mask_crc(c) == (((c >> 15) | (c << 17)) + 0xa282ead8u), "mask");
}

/* Read every record of path into recs (data copies); returns the count. */
static int read_records(const char *path, uint8_t **recs, size_t *lens, int max) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "%s: cannot open", path);
    if (!f) return 0;
    int n = 0;
    uint8_t h[12], t[4];
    while (n < max && fread(h, 1, 12, f) == 12) {
        const uint64_t len = le(h, 8);
        CHECK(le(h + 8, 4) == st_tb_mask_crc(st_crc32c(0, h, 8)), "record %d: length crc", n);
        CHECK(len < 1 << 20, "record %d: length %llu", n, (unsigned long long)len);
        if (len >= 1 << 20) break;
        recs[n] = malloc(len + 1);
        lens[n] = len;
        CHECK(fread(recs[n], 1, len, f) == len && fread(t, 1, 4, f) == 4, "record %d: truncated", n);
        CHECK(le(t, 4) == st_tb_mask_crc(st_crc32c(0, recs[n], len)), "record %d: data crc", n);
        n++;
    }
    CHECK(feof(f) || n == max, "%s: trailing bytes", path);
    fclose(f);
    return n;
}

static uint64_t varint(const uint8_t **p) {
    uint64_t v = 0;
    for (int sh = 0;; sh += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) return v;
    }
}

static void file_format(void) {
    char dir[] = "/tmp/st_tb_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    st_tb w;
    CHECK_OK(st_tb_open(&w, dir, 5));
    CHECK(strstr(w.path, "/events.out.tfevents.") != NULL, "file name %s", w.path);
    st_tb_scalar v[2] = {{"train/loss", 0.25}, {"train/lr", 3e-4}};
    CHECK_OK(st_tb_write_scalars(&w, 7, v, 2));
    char path[4096];
    snprintf(path, sizeof path, "%s", w.path);
    CHECK_OK(st_tb_close(&w));
    CHECK_OK(st_tb_close(&w));
    /* a second writer in the same second gets its own file */
    st_tb w2;
    CHECK_OK(st_tb_open(&w2, dir, 1));
    CHECK(strcmp(w2.path, path) != 0, "a second file has a new name: %s", w2.path);
    remove(w2.path);
    CHECK_OK(st_tb_close(&w2));
    CHECK_FAILS(st_tb_open(&w2, "/nonexistent/dir", 1), ST_ERR_IO, "/nonexistent/dir");

    uint8_t *recs[8] = {0};
    size_t lens[8];
    int n = read_records(path, recs, lens, 8);
    CHECK(n == 3, "%d records, expected version, START, scalars", n);
    if (n == 3) {
        /* 1: wall_time (09 + 8 bytes), file_version (1a 0d "brain.Event:2") */
        CHECK(lens[0] == 9 + 2 + 13 && recs[0][0] == 0x09 && recs[0][9] == 0x1a &&
                  memcmp(recs[0] + 11, "brain.Event:2", 13) == 0,
              "version record");
        /* 2: wall_time, step 5 (10 05), session_log (3a 02 {08 01}) */
        static const uint8_t start[] = {0x10, 0x05, 0x3a, 0x02, 0x08, 0x01};
        CHECK(lens[1] == 9 + sizeof start && memcmp(recs[1] + 9, start, sizeof start) == 0, "START record");
        /* 3: wall_time, step 7, summary { value { tag, simple_value } x 2 } */
        const uint8_t *p = recs[2] + 9, *end = recs[2] + lens[2];
        CHECK(p[0] == 0x10 && p[1] == 7 && p[2] == 0x2a, "step 7 then a summary");
        p += 3;
        CHECK(varint(&p) == (uint64_t)(end - p), "summary length");
        for (int i = 0; i < 2 && p < end; i++) {
            CHECK(*p++ == 0x0a, "Summary.value key");
            const uint64_t vl = varint(&p);
            const uint8_t *ve = p + vl;
            CHECK(*p++ == 0x0a, "Value.tag key");
            const uint64_t tl = varint(&p);
            CHECK(tl == strlen(v[i].tag) && memcmp(p, v[i].tag, tl) == 0, "tag %d", i);
            p += tl;
            CHECK(*p++ == 0x15, "Value.simple_value key");
            float f;
            memcpy(&f, p, 4);
            p += 4;
            CHECK(f == (float)v[i].value, "value %d: %g", i, (double)f);
            CHECK(p == ve, "value %d length", i);
        }
        CHECK(p == end, "event length");
    }
    for (int i = 0; i < n; i++)
        free(recs[i]);
    remove(path);
    rmdir(dir);
}

/* The last scalar of path's last event (the file metrics.c wrote), or NAN. */
static float last_scalar(const char *path, const char *tag) {
    uint8_t *recs[8] = {0};
    size_t lens[8];
    int n = read_records(path, recs, lens, 8);
    float found =
        -INFINITY; /* (not there: no writer writes -inf, a value that is not finite being left out) */
    if (n > 0) { /* wall_time (9 bytes), step (10 xx), summary (2a len) */
        const uint8_t *p = recs[n - 1] + 9, *end = recs[n - 1] + lens[n - 1];
        p += 2;
        CHECK(*p == 0x2a, "a summary");
        p++;
        varint(&p);
        while (p < end) {
            p++; /* Summary.value key */
            const uint64_t vl = varint(&p);
            const uint8_t *ve = p + vl;
            p++; /* tag key */
            const uint64_t tl = varint(&p);
            if (tl == strlen(tag) && memcmp(p, tag, tl) == 0) memcpy(&found, p + tl + 1, 4);
            p = ve;
        }
    }
    for (int i = 0; i < n; i++)
        free(recs[i]);
    return found;
}

/* A data wait of a few microseconds is a difference of two clock readings
 * (few significant bits) and can sit exactly between two floats: this one,
 * printed with cJSON's 15 digits, read back one double ulp off and rounded to
 * the other float32 than the event file's. metrics.jsonl must read back as
 * the same double, so float32 of it is the event's value exactly. */
static void metrics_match_events(void) {
    char dir[] = "/tmp/st_tb_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    st_metrics m;
    CHECK_OK(st_metrics_open(&m, dir, 0, true, true, NULL));
    const double wait_ms = 0.00082249971455894411, loss = 2.3025850929940459;
    st_metrics_step ms = {.step = 2, .loss = loss, .data_wait_ms = wait_ms};
    CHECK_OK(st_metrics_step_write(&m, &ms));
    char tb[4096], path[4200];
    snprintf(tb, sizeof tb, "%s", m.tb.path);
    CHECK_OK(st_metrics_close(&m));
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char line[4096] = "";
    FILE *f = fopen(path, "r");
    CHECK(f && fgets(line, sizeof line, f), "%s: one line", path);
    if (f) fclose(f);
    cJSON *o = cJSON_Parse(line);
    const char *names[] = {"data_wait_ms", "loss"};
    const double want[] = {wait_ms, loss};
    for (int i = 0; i < 2; i++) {
        /* cJSON's reader is strtod: the text as written, not re-rounded */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, names[i]);
        CHECK(cJSON_IsNumber(v) && v->valuedouble == want[i], "%s: metrics.jsonl %.17g, written %.17g (%s)",
              names[i], v ? v->valuedouble : NAN, want[i], line);
        char tag[64];
        snprintf(tag, sizeof tag, "train/%s", names[i]);
        const float ev = last_scalar(tb, tag);
        CHECK(v && (float)v->valuedouble == ev, "%s: float32 of metrics.jsonl's %.9g, the event holds %.9g", tag,
              v ? (double)(float)v->valuedouble : NAN, (double)ev);
    }
    cJSON_Delete(o);
    /* a value that is not a number (a stop line's unmeasured grad_norm, null in metrics.jsonl) is left out
     * of the event (it was written as NaN: a clean stop drawn as a divergence) */
    CHECK_OK(st_metrics_open(&m, dir, 0, true, true, NULL));
    snprintf(tb, sizeof tb, "%s", m.tb.path);
    st_metrics_step stop = {.step = 3, .loss = 1.5, .grad_norm = NAN};
    CHECK_OK(st_metrics_step_write(&m, &stop));
    CHECK_OK(st_metrics_close(&m));
    const float gn = last_scalar(tb, "train/grad_norm"), ls = last_scalar(tb, "train/loss");
    CHECK(isinf(gn) && gn < 0 && ls == 1.5f, "a NaN grad_norm: the event holds %g (loss %g)", (double)gn,
          (double)ls);
    remove(path);
    remove(tb);
    rmdir(dir);
}

int main(void) {
    crc_vectors();
    file_format();
    metrics_match_events();
    return st_test_finish("test_tensorboard");
}
