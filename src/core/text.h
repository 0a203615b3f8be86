/* Text built in a fixed buffer, piece by piece: the messages that list what
 * they found ("a; b; c"). */
#ifndef ST_CORE_TEXT_H
#define ST_CORE_TEXT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Append printf's text to buf (n bytes) at *at, and advance *at by its whole
 * length, as snprintf counts: past the end the text is cut and buf stays
 * terminated (n > 0), and *at > 0 still says that something was appended. */
static inline void st_appendf(char *buf, size_t n, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline void st_appendf(char *buf, size_t n, size_t *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(*at < n ? buf + *at : NULL, *at < n ? n - *at : 0, fmt, ap);
    va_end(ap);
    if (k > 0) *at += (size_t)k;
}

/* src as text a terminal shows as it is, into dst (n > 0 bytes, always
 * terminated, cut at the end): control characters other than newline and
 * tab (a terminal escape in a tensor name of a file from elsewhere) become
 * \xNN. Returns dst. */
static inline char *st_printable(char *dst, size_t n, const char *src) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (const unsigned char *c = (const unsigned char *)src; *c && o + 1 < n; c++) {
        if ((*c >= 0x20 && *c != 0x7f) || *c == '\n' || *c == '\t') {
            dst[o++] = (char)*c;
        } else {
            if (o + 5 >= n) break;
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[*c >> 4];
            dst[o++] = hex[*c & 15];
        }
    }
    dst[o] = '\0';
    return dst;
}

#endif
