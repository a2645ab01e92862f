/* Isolation probe in a compiled language: the checks of isolation.py, from a C program.
 * stdin: `INDEX N HOLD_MS`. Prints one JSON line (the same keys as isolation.py). */
#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define KEY 0x00C0DE00

static double now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec / 1e6;
}

/* "created", or the errno's name where the checks tell them apart. */
static const char *created(int r) {
    if (r >= 0) return "created";
    switch (errno) {
    case EEXIST: return "EEXIST";
    case EMFILE: return "EMFILE";
    case EACCES: return "EACCES";
    default: return strerror(errno);
    }
}

static void pids(void) {
    DIR *d = opendir("/proc");
    int first = 1;
    printf("[");
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        printf("%s%s", first ? "" : ",", e->d_name);
        first = 0;
    }
    printf("]");
    if (d) closedir(d);
}

static int count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n - 1;
}

static int abstract(int index, int connect_to) {
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int len = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "codegym-isolation-%d",
                       connect_to < 0 ? index : connect_to);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0) return -1;
    if (connect_to < 0) return bind(s, (struct sockaddr *)&a, alen) == 0 && listen(s, 64) == 0 ? 0 : -1;
    int ok = connect(s, (struct sockaddr *)&a, alen) == 0;
    close(s);
    return ok;
}

static void look(const char *name, int index, int n) {
    printf(",\"%s\":{\"sysvipc_shm\":%d,\"sysvipc_msg\":%d,\"sysvipc_sem\":%d,\"proc_pids\":", name,
           count_lines("/proc/sysvipc/shm"), count_lines("/proc/sysvipc/msg"),
           count_lines("/proc/sysvipc/sem"));
    pids();
    printf(",\"abstract_connected\":[");
    int first = 1;
    for (int j = 0; j < n; j++) {
        if (j != index && abstract(index, j) == 1) {
            printf("%s%d", first ? "" : ",", j);
            first = 0;
        }
    }
    int k = kill(-1, 0);
    printf("],\"kill_all\":\"%s\"}", k == 0 ? "delivered" : (errno == ESRCH ? "ESRCH" : strerror(errno)));
}

int main(void) {
    int index = 0, n = 1, hold_ms = 0;
    if (scanf("%d %d %d", &index, &n, &hold_ms) != 3) return 2;
    double start = now();
    printf("{\"index\":%d,\"start\":%.6f,\"pid\":%d,\"ns\":{", index, start, (int)getpid());
    const char *kinds[] = { "mnt", "ipc", "pid", "net", "uts" };
    for (int i = 0; i < 5; i++) {
        char path[64];
        struct stat st;
        snprintf(path, sizeof path, "/proc/self/ns/%s", kinds[i]);
        printf("%s\"%s\":%llu", i ? "," : "", kinds[i],
               stat(path, &st) == 0 ? (unsigned long long)st.st_ino : 0ULL);
    }
    printf("},\"proc_pids\":");
    pids();
    const char *shm = created(shmget(KEY, 4096, IPC_CREAT | IPC_EXCL | 0666));
    printf(",\"shm\":\"%s\"", shm);
    const char *msg = created(msgget(KEY, IPC_CREAT | IPC_EXCL | 0666));
    printf(",\"msg\":\"%s\"", msg);
    const char *sem = created(semget(KEY, 1, IPC_CREAT | IPC_EXCL | 0666));
    printf(",\"sem\":\"%s\"", sem);
    const char *mq = created(mq_open("/codegym-isolation", O_CREAT | O_EXCL | O_RDWR, 0666, NULL));
    printf(",\"mq\":\"%s\"", mq);
    int fd = open("/dev/shm/codegym-isolation", O_CREAT | O_EXCL | O_RDWR, 0666);
    printf(",\"posix_shm\":\"%s\"", created(fd));
    printf(",\"abstract_bind\":\"%s\"", abstract(index, -1) == 0 ? "ok" : strerror(errno));
    look("early", index, n);
    while (now() < start + hold_ms / 1000.0) usleep(10000);
    look("late", index, n);
    printf(",\"end\":%.6f}\n", now());
    return 0;
}
