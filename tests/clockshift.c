/* An LD_PRELOAD shim that moves one process's wall clock by CLOCKSHIFT_S seconds (a float, may be
 * negative): a host whose clock is off, for tests/test_clock_skew.py.
 *
 * Only the wall clock moves: clock_gettime(CLOCK_REALTIME and CLOCK_REALTIME_COARSE),
 * gettimeofday and time. Every other clock (CLOCK_MONOTONIC above all) passes through untouched,
 * so Python's timed waits (sem_clockwait / pthread_cond on the monotonic clock) keep their
 * length; libfaketime, which moves those too, hangs them on this machine.
 *
 * Build: gcc -shared -fPIC -O2 -o clockshift.so clockshift.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
typedef int (*gettimeofday_fn)(struct timeval *, void *);

/* Read once; threads racing here all write the same values. */
static long long shift_ns(void) {
    static int known = 0;
    static long long ns = 0;
    if (!known) {
        const char *raw = getenv("CLOCKSHIFT_S");
        ns = raw ? (long long)(strtod(raw, NULL) * 1e9) : 0;
        known = 1;
    }
    return ns;
}

static clock_gettime_fn real_clock_gettime(void) {
    static clock_gettime_fn fn = NULL;
    if (!fn) fn = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    return fn;
}

/* The real wall clock plus the shift, in nanoseconds since the epoch. */
static long long shifted_now_ns(clockid_t clock) {
    struct timespec ts;
    real_clock_gettime()(clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec + shift_ns();
}

static void split(long long ns, time_t *sec, long *rest, long per_second) {
    long long q = ns / 1000000000LL, r = ns % 1000000000LL;
    if (r < 0) { /* before the epoch, or a negative shift near it: keep the remainder positive */
        q -= 1;
        r += 1000000000LL;
    }
    *sec = (time_t)q;
    *rest = (long)(r / (1000000000LL / per_second));
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (clock != CLOCK_REALTIME && clock != CLOCK_REALTIME_COARSE) return real_clock_gettime()(clock, ts);
    split(shifted_now_ns(clock), &ts->tv_sec, &ts->tv_nsec, 1000000000L);
    return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
    if (tz) {
        static gettimeofday_fn real = NULL;
        if (!real) real = (gettimeofday_fn)dlsym(RTLD_NEXT, "gettimeofday");
        struct timeval ignored;
        real(&ignored, tz); /* the (obsolete) time zone, as the real call fills it */
    }
    long usec;
    split(shifted_now_ns(CLOCK_REALTIME), &tv->tv_sec, &usec, 1000000L);
    tv->tv_usec = (suseconds_t)usec;
    return 0;
}

time_t time(time_t *out) {
    time_t sec;
    long ignored;
    split(shifted_now_ns(CLOCK_REALTIME), &sec, &ignored, 1L);
    if (out) *out = sec;
    return sec;
}
