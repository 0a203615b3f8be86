/* TensorBoard event writer: TFRecord framing with CRC-32C and the few Event
 * and Summary protobuf fields that scalars need, encoded by hand (the wire
 * format: https://protobuf.dev/programming-guides/encoding/). Field numbers
 * are those of tensorflow/core/util/event.proto and
 * tensorflow/core/framework/summary.proto. */
#include "tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint32_t st_crc32c(uint32_t crc, const void *data, size_t nbytes) {
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < nbytes; i++) { /* bitwise: records are small */
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

uint32_t st_tb_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* A growing byte buffer for one encoded message; `oom` sticks. */
typedef struct pbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} pbuf;

static void put(pbuf *b, const void *data, size_t nbytes) {
    if (b->oom || nbytes == 0) return;
    if (b->n + nbytes > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + nbytes)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, nbytes);
    b->n += nbytes;
}

static void put_varint(pbuf *b, uint64_t v) {
    uint8_t t[10];
    int n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, t, (size_t)n);
}

/* The key of a field: (number << 3) | wire type (0 varint, 1 fixed64,
 * 2 length-delimited, 5 fixed32). */
static void put_key(pbuf *b, int field, int wire) { put_varint(b, (uint64_t)(field << 3 | wire)); }

static void put_bytes(pbuf *b, int field, const void *data, size_t nbytes) {
    put_key(b, field, 2);
    put_varint(b, nbytes);
    put(b, data, nbytes);
}

static void put_le(pbuf *b, uint64_t v, int nbytes) {
    uint8_t t[8];
    for (int i = 0; i < nbytes; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)nbytes);
}

static void put_double(pbuf *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, 1);
    put_le(b, u, 8);
}

static void put_float(pbuf *b, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, 5);
    put_le(b, u, 4);
}

static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Frame `data` as one TFRecord, write it with one fwrite and flush. */
static st_status write_record(st_tb *w, const pbuf *data) {
    if (data->oom) return st_fail(ST_ERR_NOMEM, "%s: out of memory encoding an event", w->path);
    pbuf rec = {0};
    const uint64_t len = data->n;
    put_le(&rec, len, 8);
    if (!rec.oom)
        put_le(&rec, st_tb_mask_crc(st_crc32c(0, rec.p, 8)), 4); /* (rec.p is NULL after a failed put) */
    put(&rec, data->p, data->n);
    put_le(&rec, st_tb_mask_crc(st_crc32c(0, data->p, data->n)), 4);
    bool ok = !rec.oom && fwrite(rec.p, 1, rec.n, w->f) == rec.n && fflush(w->f) == 0;
    free(rec.p);
    if (rec.oom) return st_fail(ST_ERR_NOMEM, "%s: out of memory framing an event", w->path);
    if (!ok) return st_fail(ST_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    return ST_OK;
}

st_status st_tb_open(st_tb *w, const char *out_dir, int64_t first_step) {
    memset(w, 0, sizeof *w);
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    const long long now = (long long)time(NULL);
    int fd = -1;
    for (int k = 0; k < 1000 && fd < 0; k++) {
        int n = k == 0 ? snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s", out_dir, now, host)
                       : snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%d", out_dir, now,
                                  host, k);
        if (n < 0 || (size_t)n >= sizeof w->path)
            return st_fail(ST_ERR_ARG, "%s: the directory name is too long for an event file", out_dir);
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            return st_fail(ST_ERR_IO, "%s: cannot create the TensorBoard event file: %s", w->path,
                           strerror(errno));
    }
    if (fd < 0) return st_fail(ST_ERR_IO, "%s: too many event files with this name", w->path);
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        close(fd);
        return st_fail(ST_ERR_IO, "%s: cannot open: %s", w->path, strerror(errno));
    }
    const double t = wall_time();
    static const char version[] = "brain.Event:2";
    pbuf ev = {0}, log = {0};
    put_double(&ev, 1, t);
    put_bytes(&ev, 3, version, sizeof version - 1);
    st_status s = write_record(w, &ev);
    put_key(&log, 1, 0); /* SessionLog.status = START */
    put_varint(&log, 1);
    ev.n = 0;
    put_double(&ev, 1, t);
    put_key(&ev, 2, 0);
    put_varint(&ev, (uint64_t)first_step);
    put_bytes(&ev, 7, log.p, log.n);
    if (s == ST_OK)
        s = log.oom ? st_fail(ST_ERR_NOMEM, "%s: out of memory encoding the run's start event", w->path)
                    : write_record(w, &ev);
    free(ev.p);
    free(log.p);
    if (s != ST_OK) (void)st_tb_close(w);
    return s;
}

st_status st_tb_write_scalars(st_tb *w, int64_t step, const st_tb_scalar *v, int n) {
    if (!w->f) return ST_OK;
    pbuf sum = {0}, val = {0}, ev = {0};
    for (int i = 0; i < n; i++) {
        val.n = 0;
        put_bytes(&val, 1, v[i].tag, strlen(v[i].tag));
        put_float(&val, 2, (float)v[i].value);
        put_bytes(&sum, 1, val.p, val.n); /* Summary.value, repeated */
        sum.oom |= val.oom;
    }
    put_double(&ev, 1, wall_time());
    put_key(&ev, 2, 0);
    put_varint(&ev, (uint64_t)step);
    put_bytes(&ev, 5, sum.p, sum.n);
    ev.oom |= sum.oom;
    st_status s = write_record(w, &ev);
    free(sum.p);
    free(val.p);
    free(ev.p);
    return s;
}

st_status st_tb_close(st_tb *w) {
    if (!w || !w->f) return ST_OK;
    errno = 0;
    const int rc = fclose(w->f);
    w->f = NULL;
    if (rc != 0)
        return st_fail(ST_ERR_IO,
                       "%s: closing it failed: %s (its last events may not have reached the storage)",
                       w->path, strerror(errno ? errno : EIO));
    return ST_OK;
}
