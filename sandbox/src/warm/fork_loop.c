/* The fork server's request loop and each run's sandbox setup (issue 17), called by server.py
 * through ctypes.
 *
 * Why native: every fork write-protects the whole server, so each page written before the next
 * fork is a copy-on-write fault (~2-4 us), in the server and in the child alike. Python's request
 * loop wrote ~190 pages per run, and a child's setup in Python (ctypes, `os`, `resource`) many
 * more; here the server writes a handful (its stack and one buffer) and a child returns to Python
 * only once it is sandboxed, to run the program.
 *
 * Trusted code of the server. Per request it reads the header line the host puts first, `run <id>`
 * or `kill <id>`; a run's body is a `struct run_setup` (fixed layout, written by warm/run.rs), the
 * work dir's bytes, then JSON that only the child's Python reads. Returns
 *   > 0  in a run's child, sandboxed: the JSON's length (moved to the start of `buf`) and the
 *        run's report descriptor in `*report_fd` (-1 without one);
 *   -2   in a child forked ahead (while the server is nearly idle), its namespaces set up: its
 *        socket in `*report_fd`; Python warms up (each page it writes then is one the run does
 *        not copy on its critical path) and calls `codegym_wait_run`;
 *   0    in the server when the host closed its end (shut down);
 *   -1   in the server on an unrecoverable error (errno set): it exits, the host starts another.
 * A child whose setup fails writes `stage: reason` on the run's setup pipe and exits 127 (as the
 * Python setup did); one whose setup succeeded writes `+` there first. Replies, one per run:
 * `{"id", "status", "cpu_ms", "max_rss"}` or `{"id", "error"}`.
 *
 * Every child is a copy of the server's memory, so the server keeps nothing of a run once it has
 * handed the run on: it clears each request from `buf` as soon as it is forked or sent (a later,
 * shorter request would leave the rest of a longer one for its child to read), and a child
 * forgets the server's table of other runs. A child's buffer then holds its own request only,
 * which it clears too once parsed (server.py).
 *
 * Must be loaded with `ctypes.PyDLL` (the GIL stays held): the fork runs CPython's own fork hooks
 * as `os.fork()` does; they are passed in, so this library links nothing of Python. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_FDS 8
#define MAX_RLIMITS 16
#define MAX_CGROUPS 2

typedef void (*py_hook)(void);

/* Set once by server.py (a ctypes.Structure of the same layout). */
struct fork_config {
    int ctl, wake_r, own_pid_ns, pool;
    int unshare_flags, mount_proc; /* a run's own namespaces (mount, IPC...) and a fresh /proc */
    uint64_t proc_access;          /* Landlock access to the run's /proc */
    long sys_landlock_add_rule, sys_landlock_restrict_self;
    const struct sock_fprog *seccomp;
    int nseccomp;
    py_hook before_fork, after_fork_parent, after_fork_child;
    const struct sock_fprog *server_seccomp; /* the filter's part the server installs on itself */
    int nserver_seccomp;
};

/* A run's setup, as warm/run.rs writes it (native endianness, no padding). The run's descriptors:
 * stdin, stdout, stderr, the setup pipe, `ncgroups` files that move the child into its own
 * groups (cgroup/pool.rs), then the report channel and the Landlock ruleset, when there are. */
struct run_setup {
    int64_t uid, gid;  /* < 0: keep the server's ids */
    uint64_t report;   /* 1: the run has a report channel */
    uint64_t ncgroups; /* each: a `tasks` (v1) or `cgroup.procs` (v2) file to write `0` to */
    uint64_t nrlimits;
    struct { uint64_t resource, soft, hard; } rlimits[MAX_RLIMITS];
    uint64_t dir_len; /* the work dir's bytes follow */
};

/* `struct landlock_path_beneath_attr` (packed). */
struct __attribute__((packed)) path_beneath {
    uint64_t allowed_access;
    int32_t parent_fd;
};

struct run { pid_t pid; unsigned long long id; };
struct idle { pid_t pid; int sock; };

/* Runs in flight and children waiting; grown as needed (the host bounds runs in flight). */
static struct run *runs;
static size_t nruns, cap_runs;
static struct idle *idle;
static size_t nidle, cap_idle;

static int grow(void **arr, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t cap2 = *cap ? *cap * 2 : 16;
    while (cap2 < need) cap2 *= 2;
    void *p = realloc(*arr, cap2 * size);
    if (!p) return -1;
    *arr = p;
    *cap = cap2;
    return 0;
}

/* ---- the child's side ------------------------------------------------------------------- */

/* In a new child: the server's table of runs in flight and children waiting (their ids and pids)
 * is nothing of this run's. */
static void forget_runs(void) {
    if (runs) explicit_bzero(runs, cap_runs * sizeof *runs);
    if (idle) explicit_bzero(idle, cap_idle * sizeof *idle);
    nruns = nidle = 0;
}

/* In a run's child: `buf` held the whole message (`total` bytes, the rest of `buf` is zero: see
 * the loop); moves the JSON at `at` to its start and clears everything after it. Returns its
 * length. */
static int keep_json(char *buf, size_t total, size_t at) {
    size_t len = total - at;
    memmove(buf, buf + at, len);
    explicit_bzero(buf + len, total - len);
    return (int)len;
}

static _Noreturn void fail(int setup, const char *stage, int err) {
    char out[256];
    int len = snprintf(out, sizeof out, "%s: %s", stage, strerror(err));
    if (len > 0 && write(setup, out, (size_t)len) < 0) {
        /* nothing left to tell it with */
    }
    _exit(127);
}

/* What needs nothing of the run: new mount and IPC namespaces and a fresh /proc (the child is
 * already PID 1 of a new PID namespace). Returns the failed stage, or NULL. */
static const char *namespaces(const struct fork_config *cfg) {
    if (unshare(cfg->unshare_flags) < 0) return "unshare";
    if (cfg->mount_proc && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        return "mount /proc";
    return NULL;
}

/* Sandboxes the calling child for one run: `body` is the request after its header. A child
 * forked on demand (`own_namespaces` 0) first enters its own mount and IPC namespaces and mounts
 * its own /proc, as a child forked ahead did before it waited: every run gets them, whichever
 * path forked it. Exits on failure; returns the JSON's offset in `body`. Order as on the fresh
 * backend: seccomp last. */
static size_t sandbox(const struct fork_config *cfg, const char *body, size_t n, const int *fds,
                      int nfds, int *report_fd, int own_namespaces) {
    int setup = nfds > 3 ? fds[3] : -1;
    struct run_setup rs;
    if (setup < 0) _exit(127);
    if (n < sizeof rs) fail(setup, "request", EPROTO);
    memcpy(&rs, body, sizeof rs);
    if (rs.nrlimits > MAX_RLIMITS || rs.ncgroups > MAX_CGROUPS || rs.dir_len == 0 ||
        rs.dir_len >= 4096 || rs.dir_len >= n - sizeof rs || /* the JSON follows */
        nfds < 4 + (int)rs.ncgroups + (rs.report ? 1 : 0))
        fail(setup, "request", EPROTO);
    /* Its own memory and pids groups before anything else: nothing of the run counts against
     * another's budget. On v1 `0` in `tasks` moves this thread (the child has no other) without
     * the kernel's global lock that moving another process takes. */
    for (uint64_t i = 0; i < rs.ncgroups; i++)
        if (write(fds[4 + i], "0", 1) != 1) fail(setup, "cgroup", errno);
    if (!own_namespaces) {
        const char *stage = namespaces(cfg);
        if (stage != NULL) fail(setup, stage, errno);
    }
    char dir[4096];
    memcpy(dir, body + sizeof rs, rs.dir_len);
    dir[rs.dir_len] = 0;
    int after = 4 + (int)rs.ncgroups;
    *report_fd = rs.report ? fds[after] : -1;
    int ruleset_at = rs.report ? after + 1 : after;

    if (setsid() < 0) fail(setup, "setsid", errno);
    for (int i = 0; i < 3; i++)
        if (dup2(fds[i], i) < 0) fail(setup, "dup2", errno);
    if (chdir(dir) < 0) fail(setup, "chdir", errno);
    for (uint64_t i = 0; i < rs.nrlimits; i++) {
        struct rlimit rl = { .rlim_cur = rs.rlimits[i].soft, .rlim_max = rs.rlimits[i].hard };
        if (setrlimit((int)rs.rlimits[i].resource, &rl) < 0) fail(setup, "setrlimit", errno);
    }
    if (rs.uid >= 0) {
        if (setgroups(0, NULL) < 0 || setresgid((gid_t)rs.gid, (gid_t)rs.gid, (gid_t)rs.gid) < 0 ||
            setresuid((uid_t)rs.uid, (uid_t)rs.uid, (uid_t)rs.uid) < 0)
            fail(setup, "setuid", errno);
    }
    if (nfds > ruleset_at) {
        int ruleset = fds[ruleset_at];
        if (cfg->mount_proc) {
            struct path_beneath rule = { .allowed_access = cfg->proc_access };
            rule.parent_fd = open("/proc", O_PATH | O_CLOEXEC);
            if (rule.parent_fd < 0 || syscall(cfg->sys_landlock_add_rule, ruleset, 1, &rule, 0) < 0)
                fail(setup, "landlock", errno);
            close(rule.parent_fd);
        }
        if (syscall(cfg->sys_landlock_restrict_self, ruleset, 0) < 0) fail(setup, "landlock", errno);
    }
    /* Every descriptor but 0-2, the setup pipe and the report channel. */
    int keep[2] = { setup, *report_fd };
    if (keep[1] >= 0 && keep[1] < keep[0]) keep[0] = keep[1], keep[1] = setup;
    unsigned int low = 3;
    for (int i = 0; i < 2; i++) {
        if (keep[i] < 0) continue;
        if ((unsigned int)keep[i] > low && close_range(low, (unsigned int)keep[i] - 1, 0) < 0)
            fail(setup, "close fds", errno);
        low = (unsigned int)keep[i] + 1;
    }
    if (close_range(low, ~0U, 0) < 0) fail(setup, "close fds", errno);
    for (int i = 0; i < cfg->nseccomp; i++)
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &cfg->seccomp[i], 0, 0) < 0)
            fail(setup, "seccomp", errno);
    if (write(setup, "+", 1) != 1) _exit(127); /* the host gave up on the run */
    close(setup);
    return sizeof rs + rs.dir_len;
}

/* ---- the server's side ------------------------------------------------------------------ */

/* Forks a child that is PID 1 of a new PID namespace (0 in the child), with CPython's fork hooks
 * as `os.fork()` runs them. The server goes back to its own PID namespace for the next child. */
static pid_t fork_run(const struct fork_config *cfg) {
    if (unshare(CLONE_NEWPID) < 0) return -1;
    cfg->before_fork();
    pid_t pid = fork();
    int err = errno;
    if (pid == 0) {
        cfg->after_fork_child();
        return 0;
    }
    cfg->after_fork_parent();
    if (setns(cfg->own_pid_ns, CLONE_NEWPID) < 0) _exit(70); /* cannot fork any further */
    errno = err;
    return pid;
}

static void send_text(int ctl, const char *text, int len) {
    if (len <= 0) return;
    while (send(ctl, text, (size_t)len, 0) < 0 && errno == EINTR) {
    }
}

static void reply_error(int ctl, unsigned long long id, const char *what, int err) {
    char out[256];
    send_text(ctl, out, snprintf(out, sizeof out, "{\"id\":%llu,\"error\":\"%s: %s\"}", id, what,
                                 strerror(err)));
}

/* One message with up to MAX_FDS descriptors; returns its length, 0 at EOF, -1 on error. */
static ssize_t recv_with_fds(int sock, char *buf, size_t size, int *fds, int *nfds) {
    union { char raw[CMSG_SPACE(MAX_FDS * sizeof(int))]; struct cmsghdr align; } control;
    struct iovec iov = { .iov_base = buf, .iov_len = size };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.raw,
                          .msg_controllen = sizeof control.raw };
    ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    *nfds = 0;
    if (n < 0) return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (*nfds < MAX_FDS) fds[(*nfds)++] = fd;
            else close(fd);
        }
    }
    if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
        for (int i = 0; i < *nfds; i++) close(fds[i]);
        *nfds = 0;
        errno = EMSGSIZE;
        return -1;
    }
    return n;
}

static int send_with_fds(int sock, const char *buf, size_t len, const int *fds, int nfds) {
    union { char raw[CMSG_SPACE(MAX_FDS * sizeof(int))]; struct cmsghdr align; } control;
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (nfds > 0) {
        memset(&control, 0, sizeof control);
        msg.msg_control = control.raw;
        msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    ssize_t n;
    while ((n = sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    return n == (ssize_t)len ? 0 : -1;
}

/* A child forked ahead, once the loop returned -2 in it and its Python warmed up: waits on
 * `sock` for a run's body and descriptors (sent by the loop below), then sandboxes itself for it.
 * Returns like the loop in a run's child. */
int codegym_wait_run(const struct fork_config *cfg, int sock, char *buf, int bufsize,
                     int *report_fd) {
    int fds[MAX_FDS], nfds;
    ssize_t n;
    while ((n = recv_with_fds(sock, buf, (size_t)bufsize, fds, &nfds)) < 0 && errno == EINTR) {
    }
    if (n <= 0) _exit(0); /* the server went away or shut the pool */
    close(sock);
    size_t at = sandbox(cfg, buf, (size_t)n, fds, nfds, report_fd, 1);
    return keep_json(buf, (size_t)n, at);
}

/* Reaps every exited child: a run's exit is its reply; a child forked ahead that exited failed
 * its namespace setup, so the server stops forking ahead (runs fork on demand and report it). */
static void reap(int ctl, int *prefork) {
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, WNOHANG, &ru);
        if (pid < 0 && errno == EINTR) continue;
        if (pid <= 0) return;
        size_t i;
        for (i = 0; i < nruns && runs[i].pid != pid; i++) {
        }
        if (i < nruns) {
            long long cpu_ms = ((long long)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
                               ((long long)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
            char out[160];
            send_text(ctl, out,
                      snprintf(out, sizeof out,
                               "{\"id\":%llu,\"status\":%d,\"cpu_ms\":%lld,\"max_rss\":%lld}",
                               runs[i].id, status, cpu_ms, (long long)ru.ru_maxrss * 1024));
            runs[i] = runs[--nruns];
            continue;
        }
        for (i = 0; i < nidle && idle[i].pid != pid; i++) {
        }
        if (i < nidle) {
            close(idle[i].sock);
            idle[i] = idle[--nidle];
            *prefork = 0;
            dprintf(2, "pre-forked child exited (%d); forking on demand\n", status);
        }
    }
}

/* The header line `run <id>` / `kill <id>`: returns 'r', 'k' or 0, the id, and where the body
 * starts. */
static int header(const char *buf, size_t n, unsigned long long *id, size_t *rest) {
    const char *nl = memchr(buf, '\n', n);
    size_t len = nl ? (size_t)(nl - buf) : n;
    char line[48];
    if (len == 0 || len >= sizeof line) return 0;
    memcpy(line, buf, len);
    line[len] = 0;
    int op = 0;
    const char *num = NULL;
    if (strncmp(line, "run ", 4) == 0) op = 'r', num = line + 4;
    else if (strncmp(line, "kill ", 5) == 0) op = 'k', num = line + 5;
    if (!op || *num < '0' || *num > '9') return 0;
    char *end;
    errno = 0;
    *id = strtoull(num, &end, 10);
    if (errno || *end) return 0;
    *rest = nl ? len + 1 : n;
    if (op == 'r' && *rest >= n) return 0; /* a run without its body */
    return op;
}

int codegym_fork_loop(const struct fork_config *cfg, char *buf, int bufsize, int *report_fd) {
    int prefork = cfg->pool;
    /* Once, on the server itself (seccomp.rs: `build_for_fork_server`): every child inherits it
     * and adds the rest of the filter in `sandbox`, so no child attaches the whole program. */
    for (int i = 0; i < cfg->nserver_seccomp; i++)
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &cfg->server_seccomp[i], 0, 0) < 0) return -1;
    for (;;) {
        /* Fork ahead only while at most one run is in flight and no request waits: a request
         * never waits for it, and under load (where forking ahead saves no CPU) runs fork on
         * demand. */
        int timeout = -1;
        if ((int)nidle < prefork && nruns <= 1) {
            struct pollfd p = { .fd = cfg->ctl, .events = POLLIN };
            if (poll(&p, 1, 0) > 0) {
                timeout = 0;
            } else {
                int pair[2] = { -1, -1 };
                pid_t pid = -1;
                if (grow((void **)&idle, &cap_idle, nidle + 1, sizeof *idle) == 0 &&
                    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0)
                    pid = fork_run(cfg);
                if (pid == 0) { /* forked ahead: namespaces now, the run later */
                    int sock = pair[1];
                    close(pair[0]);
                    forget_runs();
                    if (namespaces(cfg) != NULL) _exit(126); /* the server stops forking ahead */
                    /* The server's own descriptors (its socket to the host included). */
                    if ((sock > 3 && close_range(3, (unsigned int)sock - 1, 0) < 0) ||
                        close_range((unsigned int)sock + 1, ~0U, 0) < 0)
                        _exit(126);
                    *report_fd = sock;
                    return -2;
                }
                if (pair[1] >= 0) close(pair[1]);
                if (pid > 0) {
                    idle[nidle].pid = pid;
                    idle[nidle].sock = pair[0];
                    nidle++;
                } else {
                    if (pair[0] >= 0) close(pair[0]);
                    prefork = 0;
                }
                timeout = 0;
            }
        }
        struct pollfd p[2] = { { .fd = cfg->ctl, .events = POLLIN },
                               { .fd = cfg->wake_r, .events = POLLIN } };
        int ready = poll(p, 2, timeout);
        if (ready < 0 && errno != EINTR) return -1;
        if (ready > 0 && p[1].revents) {
            char drain[512];
            while (read(cfg->wake_r, drain, sizeof drain) > 0) {
            }
        }
        if (ready > 0 && p[0].revents) {
            int fds[MAX_FDS], nfds;
            ssize_t n = recv_with_fds(cfg->ctl, buf, (size_t)bufsize, fds, &nfds);
            if (n == 0) return 0;
            if (n < 0) {
                if (errno == EINTR || errno == EAGAIN) goto reap;
                if (errno == EMSGSIZE) { /* over `bufsize` or MAX_FDS: the run fails, saying why */
                    unsigned long long id = 0;
                    size_t rest = 0;
                    if (header(buf, (size_t)bufsize, &id, &rest) == 'r')
                        reply_error(cfg->ctl, id, "request", EMSGSIZE);
                    else
                        dprintf(2, "oversized request from the host ignored\n");
                    explicit_bzero(buf, (size_t)bufsize); /* its first `bufsize` bytes */
                    goto reap;
                }
                return -1;
            }
            unsigned long long id = 0;
            size_t rest = 0;
            int op = header(buf, (size_t)n, &id, &rest);
            if (op == 'r') {
                pid_t pid = -1;
                while (nidle > 0 && pid < 0) {
                    struct idle w = idle[--nidle];
                    if (send_with_fds(w.sock, buf + rest, (size_t)n - rest, fds, nfds) == 0) {
                        pid = w.pid;
                    } else if (prefork) {
                        /* It died before `reap` saw it (which now will not: it is off the
                         * list): the same failure, so the same answer. */
                        prefork = 0;
                        dprintf(2, "pre-forked child gone; forking on demand\n");
                    }
                    close(w.sock); /* a dead one is reaped below */
                }
                if (pid < 0) {
                    if (grow((void **)&runs, &cap_runs, nruns + 1, sizeof *runs) < 0) {
                        reply_error(cfg->ctl, id, "fork", ENOMEM);
                    } else {
                        pid = fork_run(cfg);
                        if (pid < 0) reply_error(cfg->ctl, id, "fork", errno);
                    }
                }
                if (pid == 0) {
                    forget_runs();
                    size_t at =
                        sandbox(cfg, buf + rest, (size_t)n - rest, fds, nfds, report_fd, 0);
                    return keep_json(buf, (size_t)n, rest + at);
                }
                for (int i = 0; i < nfds; i++) close(fds[i]);
                if (pid > 0 && grow((void **)&runs, &cap_runs, nruns + 1, sizeof *runs) == 0) {
                    runs[nruns].pid = pid;
                    runs[nruns].id = id;
                    nruns++;
                } else if (pid > 0) { /* cannot track it: no reply would come */
                    kill(pid, SIGKILL);
                    reply_error(cfg->ctl, id, "fork", ENOMEM);
                }
            } else {
                for (int i = 0; i < nfds; i++) close(fds[i]);
                if (op == 'k') {
                    for (size_t i = 0; i < nruns; i++)
                        if (runs[i].id == id) kill(runs[i].pid, SIGKILL); /* its namespace's init */
                } else {
                    dprintf(2, "malformed request from the host ignored\n");
                }
            }
            /* Handed on (forked, or sent to a child forked ahead): every later child, forked
             * on demand or ahead, would otherwise inherit it past the end of its own request. */
            explicit_bzero(buf, (size_t)n);
        }
    reap:
        reap(cfg->ctl, &prefork);
    }
}
