/* The per-thread last-error buffer behind st_fail / st_last_error. */
#include "scaletrain/status.h"

#undef st_fail /* the analyzer's macros (status.h): the functions are defined here */
#undef st_fail_context

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_ERRMSG_MAX 8192 /* (a message names files: PATH_MAX is 4096, and the reason comes after) */

static _Thread_local char st_errmsg[ST_ERRMSG_MAX];

const char *st_status_name(st_status s) {
    switch (s) {
    case ST_OK: return "ok";
    case ST_ERR_ARG: return "bad argument";
    case ST_ERR_CONFIG: return "configuration error";
    case ST_ERR_IO: return "I/O error";
    case ST_ERR_FORMAT: return "format error";
    case ST_ERR_SHAPE: return "shape error";
    case ST_ERR_NOMEM: return "out of memory";
    case ST_ERR_NUMERIC: return "numeric error";
    case ST_ERR_INTERNAL: return "internal error";
    case ST_ERR_UNSUPPORTED: return "unsupported";
    case ST_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown status";
}

st_status st_vfail(st_status code, const char *fmt, va_list ap) {
    vsnprintf(st_errmsg, sizeof st_errmsg, fmt, ap);
    return code;
}

st_status st_fail(st_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    st_vfail(code, fmt, ap);
    va_end(ap);
    return code;
}

st_status st_fail_context(st_status code, const char *fmt, ...) {
    char prefix[512], old[ST_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, st_errmsg, sizeof old);
    snprintf(st_errmsg, sizeof st_errmsg, "%s%s", prefix, old);
    return code;
}

void st_internal_error(const char *file, int line, const char *what) {
    fprintf(stderr, "scaletrain: internal error at %s:%d: %s; please report it\n", file, line, what);
    fflush(stderr);
    abort();
}

const char *st_last_error(void) { return st_errmsg; }

void st_clear_error(void) { st_errmsg[0] = '\0'; }

void st_error_keep(st_error_kept *k, st_status s) {
    k->s = s;
    k->msg[0] = '\0';
    if (s != ST_OK) snprintf(k->msg, sizeof k->msg, "%s", st_errmsg);
}

st_status st_error_restore(const st_error_kept *k) {
    if (k->s != ST_OK) snprintf(st_errmsg, sizeof st_errmsg, "%s", k->msg);
    return k->s;
}
