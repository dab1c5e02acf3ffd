/* A test's stand-in for clocks that misbehave: preloaded into a process
 * (LD_PRELOAD), it shifts and scales that process's wall clock and shifts
 * its boot-time clock as the file named by REDQUORUM_TEST_CLOCK says, so a
 * redis-server's clock can run fast or step, and a client can look as if
 * its machine had been suspended. Where REDQUORUM_TEST_MONOTONIC_RATE is
 * set (a client whose own clock runs slow or fast), the monotonic and
 * boot-time clocks run at that rate from the process's first reading of
 * each; otherwise they are left alone (boot time only shifted).
 *
 * The file holds four numbers: wall offset (ns), wall rate, the wall
 * instant (ns) the rate counts from, boot-time offset (ns); and optionally
 * two more: a monotonic rate and the real monotonic instant (ns) it counts
 * from (a client whose clock stalls while it runs: the monotonic and
 * boot-time clocks run at that rate from then on, where the variable above
 * is not set). The faked wall
 * clock reads real + offset + (real - anchor) * (rate - 1). The file is
 * read again at most every 2 ms.
 *
 * The real clocks are read with the raw system call, never through the
 * dynamic linker (a faking library that looks its originals up with dlsym
 * deadlocks redis-server at start-up inside its allocator's setup). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long loaded_at = -1, wall_offset, anchor, boot_offset, mono_from;
static double rate = 1.0, file_mono_rate = 1.0;

/* The monotonic rate (0: not read yet) and each scaled clock's first
 * real reading (-1: none yet). */
static double mono_rate;
static long long anchors[2] = {-1, -1};

static double monotonic_rate(void) {
    if (mono_rate == 0) {
        const char *v = getenv("REDQUORUM_TEST_MONOTONIC_RATE");
        double r = v ? strtod(v, NULL) : 1.0;
        mono_rate = r > 0 ? r : 1.0;
    }
    return mono_rate;
}

/* A monotonic or boot-time reading at the monotonic rate, counted from
 * the clock's first reading in this process (`which`: 0 or 1). */
static int raw(clockid_t id, struct timespec *ts);
static long long nanos(const struct timespec *ts);
static void load(void);

/* The monotonic clock as the file's rate makes it, from its instant on. */
static long long from_file(long long real_mono) {
    load();
    if (mono_from <= 0 || real_mono < mono_from) return real_mono;
    return mono_from + (long long)((double)(real_mono - mono_from) * file_mono_rate);
}

static long long scaled(int which, long long real) {
    double r = monotonic_rate();
    if (r == 1.0) {
        if (which == 0) return from_file(real);
        /* Boot time: its distance from the monotonic clock kept. */
        struct timespec m;
        raw(CLOCK_MONOTONIC, &m);
        long long mono = nanos(&m);
        return real - mono + from_file(mono);
    }
    long long none = -1;
    __atomic_compare_exchange_n(&anchors[which], &none, real, 0, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    long long a = __atomic_load_n(&anchors[which], __ATOMIC_SEQ_CST);
    return a + (long long)((double)(real - a) * r);
}

static int raw(clockid_t id, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static long long nanos(const struct timespec *ts) {
    return (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

static void from_nanos(long long n, struct timespec *ts) {
    ts->tv_sec = n / 1000000000LL;
    ts->tv_nsec = n % 1000000000LL;
}

static void load(void) {
    struct timespec m;
    raw(CLOCK_MONOTONIC, &m);
    long long now = nanos(&m);
    if (loaded_at >= 0 && now - loaded_at < 2000000LL) return;
    loaded_at = now;
    const char *path = getenv("REDQUORUM_TEST_CLOCK");
    if (!path) return;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    char *p = buf;
    long long o = strtoll(p, &p, 10);
    double r = strtod(p, &p);
    long long a = strtoll(p, &p, 10);
    long long b = strtoll(p, &p, 10);
    double mr = strtod(p, &p);
    long long mf = strtoll(p, &p, 10);
    file_mono_rate = mr > 0 ? mr : 1.0;
    mono_from = mf;
    wall_offset = o;
    rate = r > 0 ? r : 1.0;
    anchor = a;
    boot_offset = b;
}

static long long wall(long long real) {
    load();
    return real + wall_offset + (long long)((double)(real - anchor) * (rate - 1.0));
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int r = raw(id, ts);
    if (r != 0) return r;
    if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) {
        from_nanos(wall(nanos(ts)), ts);
    } else if (id == CLOCK_BOOTTIME) {
        load();
        from_nanos(scaled(1, nanos(ts)) + boot_offset, ts);
    } else if (id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_COARSE ||
               id == CLOCK_MONOTONIC_RAW) {
        from_nanos(scaled(0, nanos(ts)), ts);
    }
    return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    if (tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
