"""Where a batch's CPU goes: every CPU sample of the machine while a command runs, by process role
and by what the kernel or the program was doing.

    python3 -S bench/anatomy.py [--freq 2000] -- target/release/codegym evaluate --tasks ... --samples ...

Runs the command under `perf record -a -g` (cpu-clock samples, plus the fork events that give each
process its role), then attributes each sample:

- roles: the host (`codegym`'s threads), the fork server (the interpreter with the most children),
  a run (a child of the fork server: one sandboxed program, or a unit-test harness's tests), a
  run's own child (the harness's candidate), other Python processes (the fresh backend, probes),
  kernel threads, idle;
- what: the innermost kernel path a sample is in (a page fault, split into copy-on-write, file and
  other; fork; the exit's memory teardown; namespaces and mounts; ...), else user code.

Prints the share of all samples for each, and CPU per run (busy samples over the fork server's
children). Needs `perf` (Debian: linux-perf) and root (or perf_event_paranoid <= -1).
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

# The first match wins, tested on the whole call chain of a sample (innermost first).
KERNEL_PATHS = [
    ("page fault: copy-on-write", ("do_wp_page",)),
    ("page fault: file", ("filemap_map_pages", "do_read_fault", "filemap_fault")),
    ("page fault: other", ("exc_page_fault",)),
    ("exit: memory teardown", ("exit_mmap",)),
    ("exit: other", ("do_exit", "do_group_exit")),
    ("fork", ("copy_process",)),
    ("exec", ("execve", "bprm_execve")),
    (
        "namespaces, mounts",
        (
            "copy_mnt_ns",
            "copy_namespaces",
            "unshare_nsproxy",
            "put_mnt_ns",
            "free_ipc",
            "do_mount",
            "path_mount",
            "cleanup_mnt",
            "proc_fill_super",
        ),
    ),
    ("seccomp, Landlock", ("seccomp", "landlock")),
    ("wait", ("kernel_waitid", "do_wait")),
    ("pipes, sockets", ("pipe_read", "pipe_write", "unix_", "sock_")),
    (
        "files",
        (
            "ext4_",
            "shmem_",
            "vfs_",
            "do_sys_openat",
            "path_openat",
            "do_unlinkat",
            "do_rmdir",
            "do_mkdirat",
            "iterate_dir",
        ),
    ),
    ("scheduler", ("__schedule", "schedule_idle", "finish_task_switch")),
]
KERNEL_THREADS = ("kworker", "ksoftirqd", "rcu_", "migration", "kthreadd", "kcompactd", "kdamond")
FORK = re.compile(r"sched_process_fork: .*? pid=(\d+) child_comm=\S+ child_pid=(\d+)")


def record(cmd, freq, data):
    perf = [
        "perf",
        "record",
        "-q",
        "-a",
        "-g",
        "-F",
        str(freq),
        "-e",
        "cpu-clock",
        "-e",
        "sched:sched_process_fork",
        "-o",
        data,
        "--",
    ]
    rc = subprocess.run(perf + cmd, check=False, stdout=subprocess.DEVNULL).returncode
    if rc != 0:
        sys.exit(f"the command (or perf) failed with exit status {rc}")
    return perf_script(data, "comm,pid,event,ip,sym,trace")


def perf_script(data, fields):
    """`perf script`'s text of a recording, with these fields."""
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", fields], capture_output=True, text=True, check=True
    )
    return out.stdout


def command_line(ap):
    """The parsed options, and the command to profile (what follows `--`)."""
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("give the command to profile after --")
    return args, cmd


def parse(text):
    """(samples as (comm, pid, call chain innermost first), {child pid: parent pid})."""
    samples, parent, current = [], {}, None
    for line in text.splitlines():
        if not line.strip():
            current = None
            continue
        if line[0] in " \t" and re.match(r"^\s+[0-9a-f]+ ", line):
            if current is not None:
                parts = line.split(None, 1)
                sym = parts[1].strip() if len(parts) > 1 else ""
                # Kernel addresses are the top of the address space (x86-64, arm64).
                current[2].append(("[k] " if parts[0].startswith("ffff") else "") + sym)
            continue
        fork = FORK.search(line)
        if fork:
            parent[int(fork.group(2))] = int(fork.group(1))
            current = None
            continue
        head = re.match(r"^\s*(.+?)\s+(\d+)\s+cpu-clock", line)
        if head:
            current = (head.group(1), int(head.group(2)), [])
            samples.append(current)
        else:
            current = None
    return samples, parent


def roles(samples, parent):
    children = collections.Counter(parent.values())
    python = {pid for comm, pid, _ in samples if comm.startswith("python")}
    servers = [p for p in children if p in python or any(parent.get(c) == p for c in python)]
    server = max(servers, key=lambda p: children[p]) if servers else None

    def role(comm, pid):
        if comm == "swapper":
            return "idle"
        if comm.startswith(KERNEL_THREADS):
            return "kernel threads"
        if comm.startswith(("codegym", "tokio")):
            return "host"
        if pid == server:
            return "fork server"
        if parent.get(pid) == server:
            return "run"
        if parent.get(parent.get(pid)) == server:
            return "run's child"
        return "other processes"

    runs = sum(1 for p in parent.values() if p == server)
    return role, runs


def what(chain):
    joined = " ".join(chain)
    for name, keys in KERNEL_PATHS:
        if any(k in joined for k in keys):
            return name
    return "kernel, other" if chain and chain[0].startswith("[k] ") else "user code"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--freq", type=int, default=2000, help="samples per second per CPU")
    args, cmd = command_line(ap)
    with tempfile.TemporaryDirectory() as tmp:
        samples, parent = parse(record(cmd, args.freq, os.path.join(tmp, "perf.data")))
    role, runs = roles(samples, parent)
    table = collections.Counter((role(comm, pid), what(chain)) for comm, pid, chain in samples)
    by_role = collections.Counter()
    by_what = collections.Counter()
    for (r, w), n in table.items():
        by_role[r] += n
        if r != "idle":
            by_what[w] += n
    total = len(samples)
    print(f"{total} samples at {args.freq} Hz on each CPU; the fork server had {runs} children")
    for r, n in by_role.most_common():
        parts = [
            f"{w} {m / total:.1%}" for (rr, w), m in table.most_common() if rr == r and m / total >= 0.003
        ]
        per_run = f" ({n / args.freq * 1000 / runs:.3f} ms per run)" if runs and r != "idle" else ""
        print(f"{r:16s} {n / total:6.1%}{per_run}   " + ", ".join(parts))
    print("\nbusy samples by what they were doing (and CPU per fork server child):")
    busy = total - by_role["idle"]
    for w, n in by_what.most_common():
        per_run = f" {n / args.freq * 1000 / runs:6.3f} ms" if runs else ""
        print(f"  {w:28s} {n / busy:6.1%}{per_run}")
    if runs:
        cpu_ms = busy / args.freq * 1000
        print(f"\nCPU per fork server child (every process, kernel threads included): {cpu_ms / runs:.2f} ms")


if __name__ == "__main__":
    main()
