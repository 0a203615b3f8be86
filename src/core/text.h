/* Text built in a fixed buffer, piece by piece: the messages that list what
 * they found ("a; b; c"). */
#ifndef ST_CORE_TEXT_H
#define ST_CORE_TEXT_H

#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
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

/* A signal's name ("SIGTERM") for the stop signals and the few others a
 * job meets, else "signal N" written into buf. */
static inline const char *st_signal_name(int sig, char buf[static 16]) {
    switch (sig) {
    case SIGTERM:
        return "SIGTERM";
    case SIGINT:
        return "SIGINT";
    case SIGQUIT:
        return "SIGQUIT";
    case SIGHUP:
        return "SIGHUP";
    case SIGUSR1:
        return "SIGUSR1";
    case SIGUSR2:
        return "SIGUSR2";
    case SIGKILL:
        return "SIGKILL";
    case SIGPIPE:
        return "SIGPIPE";
    default:
        snprintf(buf, 16, "signal %d", sig);
        return buf;
    }
}

/* The length of the valid UTF-8 sequence at s (n > 0 bytes there): 1 to
 * 4, or 0 where none starts (a stray continuation byte, a cut, overlong or
 * surrogate sequence, a code point past U+10FFFF). */
static inline size_t st_utf8_len(const unsigned char *s, size_t n) {
    const unsigned char c = s[0];
    if (c < 0x80) return 1;
    const size_t k = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = k > 0 && k <= n && !(k == 2 && c < 0xc2) && !(k == 4 && c > 0xf4);
    for (size_t j = 1; ok && j < k; j++)
        ok = (s[j] & 0xc0) == 0x80;
    if (ok && k == 3) ok = !(c == 0xe0 && s[1] < 0xa0) && !(c == 0xed && s[1] >= 0xa0);
    if (ok && k == 4) ok = !(c == 0xf0 && s[1] < 0x90) && !(c == 0xf4 && s[1] >= 0x90);
    return ok ? k : 0;
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
