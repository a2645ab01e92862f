/* The kernel work of every isolation layer a codegym run promises, with nothing of codegym in the
 * way: what `bench/fork_floor.py --layers` adds to its isolated floor. Loaded with ctypes into the
 * floor's Python, built by it with `cc -O2 -shared -fPIC -Wl,-z,now` (no symbol is resolved in a
 * child). The floor's child calls `floor_child` once after its fork, as a warm run's child runs
 * fork_loop.c's set-up; the parent calls `floor_before` and `floor_after` around each run for the
 * host's share. All of it in C, on memory set once: Python in the forking process would write
 * pages per run that its children then share and copy, which codegym's fork server, forking from
 * C (fork_loop.c), does not.
 *
 * The layers, in the order a warm run's child takes them (sandbox/src/warm/fork_loop.c): its own
 * memory and pids groups (a write of `0` to each group's `tasks`), a session, rlimits, no
 * supplementary groups and a uid and gid of its own, Landlock (the fresh `/proc` added, then
 * enforced, with `no_new_privs`), every descriptor but stdio closed, a seccomp filter. The
 * namespaces and `/proc` are the isolated floor's own (fork_floor.py). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

struct path_beneath {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

struct ruleset_attr {
    uint64_t handled_access_fs, handled_access_net, scoped;
};

struct floor_rlimit {
    int64_t resource;
    uint64_t soft, hard;
};

/* Made once (`floor_init`), as codegym's host makes its Landlock base and pooled groups once. */
struct floor_state {
    struct ruleset_attr handled;
    int32_t attr_size;
    int32_t nbase;
    int32_t base_fds[32];
    uint64_t base_access[32];
    uint64_t all_fs, proc_access;
    int32_t cgroup_fds[4];
    int32_t ncgroups;
    int32_t peak_fd, oom_fd; /* the memory group's peak (reset per run) and OOM count (read) */
    int32_t nrlimits;
    struct floor_rlimit rlimits[16];
    const struct sock_fprog *filter;
    char dir[256]; /* where each run's work dir is made */
};

static struct floor_state st;
/* The current run's. */
static int run_uid, run_ruleset = -1, run_own = -1, run_out = -1;
static char run_dir[300];

int floor_init(const struct floor_state *s) {
    st = *s;
    return 0;
}

/* The host's share of run `i`, before its fork: a work dir of its own for the run's uid, its
 * ruleset (the base, and all access to the work dir), the group's peak reset and OOM count read.
 * Returns 0 or -errno. */
int floor_before(int i, int out) {
    char oom[256];
    run_uid = 200000 + i % 64;
    run_out = out;
    snprintf(run_dir, sizeof run_dir, "%s/run-%d", st.dir, i);
    if (mkdir(run_dir, 0700) < 0 || chown(run_dir, run_uid, run_uid) < 0) return -errno;
    run_own = open(run_dir, O_PATH | O_CLOEXEC);
    if (run_own < 0) return -errno;
    run_ruleset = (int)syscall(SYS_landlock_create_ruleset, &st.handled, (size_t)st.attr_size, 0);
    if (run_ruleset < 0) return -errno;
    for (int k = 0; k <= st.nbase; k++) {
        struct path_beneath rule = {
            .allowed_access = k < st.nbase ? st.base_access[k] : st.all_fs,
            .parent_fd = k < st.nbase ? st.base_fds[k] : run_own};
        if (syscall(SYS_landlock_add_rule, run_ruleset, 1, &rule, 0) < 0) return -errno;
    }
    if (pwrite(st.peak_fd, "0", 1, 0) != 1 || pread(st.oom_fd, oom, sizeof oom, 0) < 0) return -errno;
    return 0;
}

/* The host's share after the run is reaped: its OOM count read, its ruleset and work dir gone. */
int floor_after(void) {
    char oom[256];
    if (pread(st.oom_fd, oom, sizeof oom, 0) < 0) return -errno;
    close(run_ruleset);
    close(run_own);
    return rmdir(run_dir) < 0 ? -errno : 0;
}

/* The child's layers, after its fork (and the namespaces and `/proc` of the isolated floor).
 * `skip` leaves layers out, to measure each (1 groups, 2 rlimits, 4 uid, 8 Landlock, 16 seccomp).
 * Returns 0, or the step that failed (its errno in `errno`). */
int floor_child(int skip) {
    if (!(skip & 1))
        for (int i = 0; i < st.ncgroups; i++)
            if (write(st.cgroup_fds[i], "0", 1) != 1) return 1;
    if (setsid() < 0) return 2;
    if (!(skip & 2))
        for (int i = 0; i < st.nrlimits; i++) {
            struct rlimit rl = {.rlim_cur = st.rlimits[i].soft, .rlim_max = st.rlimits[i].hard};
            if (setrlimit((int)st.rlimits[i].resource, &rl) < 0) return 3;
        }
    if (!(skip & 4) && (setgroups(0, NULL) < 0 || setresgid(run_uid, run_uid, run_uid) < 0 ||
                        setresuid(run_uid, run_uid, run_uid) < 0))
        return 4;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return 5;
    if (!(skip & 8)) {
        struct path_beneath rule = {.allowed_access = st.proc_access,
                                    .parent_fd = open("/proc", O_PATH | O_CLOEXEC)};
        if (rule.parent_fd < 0 || syscall(SYS_landlock_add_rule, run_ruleset, 1, &rule, 0) < 0)
            return 6;
        close(rule.parent_fd);
        if (syscall(SYS_landlock_restrict_self, run_ruleset, 0) < 0) return 7;
    }
    if (dup2(run_out, 1) < 0) return 8;
    if (syscall(SYS_close_range, 3U, ~0U, 0) < 0) return 9;
    if (!(skip & 16) && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, st.filter, 0, 0) < 0) return 10;
    return 0;
}
