/* Status codes and the per-thread last-error message.
 *
 * Every library function that can fail returns an st_status; the message that
 * explains it (with a hint on how to fix it) is kept per thread, like errno, and
 * read with st_last_error(). The library never exits or aborts on bad input. */
#ifndef SCALETRAIN_STATUS_H
#define SCALETRAIN_STATUS_H

#include <stdarg.h>

typedef enum st_status {
    ST_OK = 0,
    ST_ERR_ARG,      /* a caller passed a bad argument (a bug in the caller) */
    ST_ERR_CONFIG,   /* a configuration key or value is wrong */
    ST_ERR_IO,       /* a file could not be opened, read or written */
    ST_ERR_FORMAT,   /* a file's contents are malformed */
    ST_ERR_SHAPE,    /* tensor shapes do not fit together */
    ST_ERR_NOMEM,    /* an allocation failed */
    ST_ERR_NUMERIC,  /* a NaN or Inf where a finite number was needed */
    ST_ERR_INTERNAL, /* an invariant of ours broke */
    ST_ERR_UNSUPPORTED,
    ST_ERR_INTERRUPTED, /* a stop was asked for (SIGTERM, SIGINT); a checkpoint was saved */
} st_status;

const char *st_status_name(st_status s);

/* Record a message for this thread and return `code`. The message is prefixed
 * with nothing; callers write "file: what is wrong; how to fix it". */
st_status st_fail(st_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
st_status st_vfail(st_status code, const char *fmt, va_list ap);

/* Prepend context ("while loading model.safetensors: ") to the current message. */
st_status st_fail_context(st_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* For the static analyzer (make analyze), which sees one file at a time and
 * so not that these two return their code: without it every
 * `return st_fail(ST_ERR_NOMEM, ...)` after a failed allocation is a path on
 * which the failure reads as ST_OK. The code is evaluated once. status.c
 * defines the functions, after undefining these. */
#ifdef __clang_analyzer__
#define st_fail(code, ...)                                                                                   \
    __extension__({                                                                                          \
        const st_status st_fail_code_ = (code);                                                              \
        (st_fail)(st_fail_code_, __VA_ARGS__);                                                               \
        st_fail_code_;                                                                                       \
    })
#define st_fail_context(code, ...)                                                                           \
    __extension__({                                                                                          \
        const st_status st_fail_code_ = (code);                                                              \
        (st_fail_context)(st_fail_code_, __VA_ARGS__);                                                       \
        st_fail_code_;                                                                                       \
    })
#endif

/* The last message recorded on this thread ("" when none). */
const char *st_last_error(void);
void st_clear_error(void);

/* A failure's message kept across the cleanup after it, whose own calls may
 * record messages (freeing device memory after a GPU fault fails too):
 * st_error_keep(&k, s) at the cleanup label, st_error_restore(&k) after
 * it, which puts the message back when s is a failure and returns s. */
typedef struct st_error_kept {
    st_status s;
    char msg[2048];
} st_error_kept;
void st_error_keep(st_error_kept *k, st_status s);
st_status st_error_restore(const st_error_kept *k);

/* An invariant of ours, checked in every build: where it fails the process
 * stops with "scaletrain: internal error at FILE:LINE: WHAT; please report
 * it" (abort, so a core dump or a debugger shows the stack). For what no input
 * can break and no status could be returned from; a bad input is a status. */
void st_internal_error(const char *file, int line, const char *what) __attribute__((noreturn));
#define ST_INVARIANT(cond, what)                                                                             \
    do {                                                                                                     \
        if (__builtin_expect(!(cond), 0)) st_internal_error(__FILE__, __LINE__, what);                       \
    } while (0)

/* Propagate a failing status from a call. */
#define ST_TRY(expr)                                                                   \
    do {                                                                               \
        st_status st_try_s_ = (expr);                                                  \
        if (st_try_s_ != ST_OK) return st_try_s_;                                      \
    } while (0)

/* Propagate to the function's cleanup label: needs `st_status s;` and `fail:`. */
#define ST_GOTO(expr)                                                                  \
    do {                                                                               \
        s = (expr);                                                                    \
        if (s != ST_OK) goto fail;                                                     \
    } while (0)

#endif
