/* The stall watch (core/watch.h): a wait past its limit ends the process with
 * exit 1 and one line naming who, what, the limit's key and what is safe; a
 * wait that ended does not; st_watch_begin_limit's own limit replaces the
 * watch's for that wait. Each case runs in a child that blocks for good on a
 * pipe nobody writes (the stalled read), the parent reading its standard
 * error to the end. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/ticker.h"
#include "core/watch.h"

/* Fork; the child starts a watch (limit watch_s), waits "a finished wait"
 * and ends it, then "the stalled wait" with its own limit stall_s (0: the
 * watch's) and blocks. The child's standard error into err, its exit code
 * (or -1) returned. */
static int stalled_child(double watch_s, double stall_s, char *err, size_t cap) {
    int out[2], never[2];
    if (pipe(out) != 0 || pipe(never) != 0) return -2;
    const pid_t pid = fork();
    if (pid == 0) {
        close(out[0]);
        close(never[1]);
        dup2(out[1], 2);
        st_watch *w;
        if (st_watch_start(watch_s, "rank 3 of 4 (test)", "test.timeout_s", "a test's stall",
                           "nothing is lost", &w) != ST_OK)
            _exit(3);
        st_watch_begin(w, "a finished wait");
        st_watch_end(w);
        if (stall_s > 0)
            st_watch_begin_limit(w, "the stalled wait", stall_s);
        else
            st_watch_begin(w, "the stalled wait");
        char c;
        (void)!read(never[0], &c, 1); /* never returns: the parent holds the write end */
        _exit(4);
    }
    close(out[1]);
    close(never[0]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(out[0], err + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    err[n] = '\0';
    close(out[0]);
    int status = 0;
    const bool ok = pid > 0 && waitpid(pid, &status, 0) == pid;
    close(never[1]);
    return ok && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void stalls(double watch_s, double stall_s, const char *limit_words) {
    char err[4096];
    const int rc = stalled_child(watch_s, stall_s, err, sizeof err);
    CHECK(rc == 1, "watch %g s, wait %g s: the child exited %d (want 1): %s", watch_s, stall_s, rc, err);
    CHECK(strstr(err, "scaletrain: rank 3 of 4 (test): the stalled wait has not finished after ") == err,
          "the line names who and what: %s", err);
    CHECK(strstr(err, limit_words) != NULL, "the line names the key and the limit (%s): %s", limit_words,
          err);
    CHECK(strstr(err, "): a test's stall. Ending the process") &&
              strstr(err, "nothing is lost (raise test.timeout_s if it"),
          "the line gives the cause and says what is safe: %s", err);
    CHECK(!strstr(err, "a finished wait"), "a wait that ended is not named: %s", err);
}

static pid_t child;
static void kill_child(int sig) {
    (void)sig;
    kill(child, SIGKILL);
}

/* Standard error a full pipe nobody reads (as a file on storage that stopped
 * answering): st_ticker_say_within returns after its limit, a say after it
 * is dropped at once (exit 3 if it waited), and the child ends. A child
 * still there after 30 s is killed (the failure below). */
static void say_gives_up(void) {
    int p[2];
    if (pipe(p) != 0) {
        CHECK(false, "cannot make a pipe");
        return;
    }
    child = fork();
    if (child == 0) {
        close(p[0]);
        fcntl(p[1], F_SETFL, O_NONBLOCK); /* fill it, then block as storage would */
        char buf[4096];
        memset(buf, 'x', sizeof buf);
        while (write(p[1], buf, sizeof buf) > 0 || errno == EINTR) {
        }
        fcntl(p[1], F_SETFL, 0);
        dup2(p[1], 2);
        st_ticker_say_within("scaletrain: the last words\n", 0.2);
        /* that one is left inside its write: the next is dropped, not
         * waited for (its limit, 25 s, would show) */
        const double t0 = st_ticker_now();
        st_ticker_say_within("scaletrain: more words\n", 25);
        _exit(st_ticker_now() - t0 < 5 ? 0 : 3);
    }
    signal(SIGALRM, kill_child);
    alarm(30);
    int status = 0;
    const bool ok = child > 0 && waitpid(child, &status, 0) == child;
    alarm(0);
    close(p[0]);
    close(p[1]);
    CHECK(ok && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "a standard error that takes nothing held a say's caller (the child %s %d; exit 3: the say after "
          "the first waited)",
          ok && WIFSIGNALED(status) ? "was killed by signal" : "exited with",
          ok && WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

int main(void) {
    say_gives_up();
    stalls(0.2, 0, "(test.timeout_s: 0.2 s)");
    stalls(20, 0.3, "(test.timeout_s: 0.3 s)"); /* this wait's own limit, far below the watch's */
    st_watch *w = (st_watch *)1;
    CHECK_FAILS(st_watch_start(0, "who", "k", "", "", &w), ST_ERR_ARG, "limit");
    CHECK(w == NULL, "a watch that did not start is NULL");
    CHECK(st_watch_one(0, "who", "k", "", "", "a wait") == NULL, "a one-wait watch with no limit is NULL");
    st_watch *one = st_watch_one(20, "who", "k", "", "", "a wait that ends");
    CHECK(one != NULL, "a one-wait watch did not start");
    st_watch_stop(one);              /* (its wait ended well within the limit) */
    st_watch_begin(NULL, "nothing"); /* no watch: nothing, as documented */
    st_watch_begin_limit(NULL, "nothing", 1);
    st_watch_end(NULL);
    st_watch_stop(NULL);
    return st_test_finish("test_watch");
}
