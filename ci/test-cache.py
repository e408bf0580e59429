#!/usr/bin/env python3
"""Runs CTest, skipping each test whose earlier pass read exactly what it would read now.

    ci/test-cache.py NAME -- ctest --preset cpu -j 2 [CTEST ARGS...]

CTest runs under `strace -f`, which sees every file each test's processes open, execute,
list, look up or create. For each test that passed, the cache (one JSON file per NAME under
$MESHTEST_TEST_CACHE_DIR, default ~/.cache/meshtest/test-results) keeps what it read: each path
with its state then (the content's hash, a folder's listing, or absent), the test's command and
environment, and the machine's installed packages. The next run skips a test only when all of
that is the same now; it runs every other test, and the tests CTest's fixtures pull in.

What a test cannot be trusted to have read is never carried over: a test that changed a file it
had read, and a test that read a file some test wrote during a run (the order decides what it
saw). A failed or skipped test keeps no record. Paths inside the checkout are kept relative to
it, so a clone at another path reuses the records. The report lists each carried test with the
commit and time of the run that passed it (build/<tree>/test-cache.txt).

MESHTEST_TEST_CACHE=off runs every test (still traced, so the records stay fresh); without
strace every test runs untraced. docs/ci.md has the rules and what they cost.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

VERSION = 1  # a change of the rules below invalidates every record
CHECKOUT = os.getcwd()  # run from the checkout (ci/test.sh does)
# The kernel's and the tracer's own files, and the terminal: they say nothing about the code.
VOLATILE = ("/proc/", "/sys/", "/dev/", "/run/")
# Environment variables that differ between two shells running the same thing.
VOLATILE_ENV = {"_", "SHLVL", "OLDPWD", "TERM", "COLUMNS", "LINES", "SSH_CLIENT", "SSH_CONNECTION",
                "SSH_TTY", "SSH_AUTH_SOCK", "MAIL", "LS_COLORS", "TMUX", "TMUX_PANE", "DISPLAY",
                "MESHTEST_TEST_CACHE", "MESHTEST_TEST_CACHE_DIR"}


# ---- paths and states ------------------------------------------------------------------------

def portable(path):
    """The checkout's paths relative to it ("$SRC/..."), so a clone elsewhere matches."""
    if path == CHECKOUT or path.startswith(CHECKOUT + "/"):
        return "$SRC" + path[len(CHECKOUT):]
    return path


def local(path):
    return CHECKOUT + path[4:] if path.startswith("$SRC") else path


class States:
    """The state of a path now, hashed once per run (and per inode change across runs)."""

    def __init__(self, memo):
        self.memo = memo  # "dev:ino:size:mtime:ctime" -> content hash, kept between runs
        self.used, self.seen = {}, {}

    def content(self, path, st):
        stamp = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
        if stamp not in self.memo:
            h = hashlib.blake2b(digest_size=16)
            try:
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
            except OSError as e:
                return f"unreadable:{e.errno}"
            self.memo[stamp] = h.hexdigest()
        self.used[stamp] = self.memo[stamp]
        return self.memo[stamp]

    def __call__(self, path, how):
        """how: 'content' (opened, executed or looked up), 'list' (a folder read), 'link'."""
        key = (path, how)
        if key not in self.seen:
            self.seen[key] = self._state(local(path), how)
        return self.seen[key]

    def _state(self, path, how):
        try:
            if how == "link":
                return "link:" + os.readlink(path) if os.path.islink(path) else self._state(path, "content")
            st = os.stat(path)
        except OSError:
            return "absent"
        if os.path.isdir(path):
            if how != "list":
                return "dir"
            try:
                names = sorted(os.listdir(path))
            except OSError as e:
                return f"unlistable:{e.errno}"
            return "list:" + hashlib.blake2b("\0".join(names).encode(), digest_size=16).hexdigest()
        if not os.path.isfile(path):
            return "special"
        return "file:" + self.content(path, st)


# ---- reading strace's output -------------------------------------------------------------------

LINE = re.compile(r"^(\d+\.\d+) (\w+)\((.*)\) += (-?\d+|\?)(?: (\w+))?")
UNFINISHED = re.compile(r"^(\d+\.\d+) (\w+)\((.*) <unfinished \.\.\.>$")
RESUMED = re.compile(r"^\d+\.\d+ <\.\.\. (\w+) resumed>(.*)\) += (-?\d+|\?)(?: (\w+))?")
# The arguments that matter, in order: quoted strings, and folder fds with their path (-y).
TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|(?:AT_FDCWD|\b\d+)<([^>]*)>')
WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
MISSING = ("ENOENT", "ENOTDIR")
# syscall -> (which of its strings are paths, what it does to them): "read", "write", "open"
# (its flags say), "exec", "link" (reads a symlink), "chdir", "link2" (reads the first path,
# makes the second). A path's folder is the fd just before it (the *at calls), else the cwd.
FIRST, BOTH, SECOND = (0,), (0, 1), (1,)
SYSCALLS = {
    "open": (FIRST, "open"), "openat": (FIRST, "open"), "openat2": (FIRST, "open"),
    "creat": (FIRST, "write"), "execve": (FIRST, "exec"), "execveat": (FIRST, "exec"),
    "stat": (FIRST, "read"), "lstat": (FIRST, "read"), "newfstatat": (FIRST, "read"),
    "statx": (FIRST, "read"), "access": (FIRST, "read"), "faccessat": (FIRST, "read"),
    "faccessat2": (FIRST, "read"), "readlink": (FIRST, "link"), "readlinkat": (FIRST, "link"),
    "statfs": (FIRST, "read"), "getxattr": (FIRST, "read"), "lgetxattr": (FIRST, "read"),
    "listxattr": (FIRST, "read"), "llistxattr": (FIRST, "read"),
    "inotify_add_watch": (FIRST, "read"), "chdir": (FIRST, "chdir"),
    "truncate": (FIRST, "write"), "mkdir": (FIRST, "write"), "mkdirat": (FIRST, "write"),
    "rmdir": (FIRST, "write"), "unlink": (FIRST, "write"), "unlinkat": (FIRST, "write"),
    "chmod": (FIRST, "write"), "fchmodat": (FIRST, "write"), "chown": (FIRST, "write"),
    "lchown": (FIRST, "write"), "fchownat": (FIRST, "write"), "utime": (FIRST, "write"),
    "utimes": (FIRST, "write"), "utimensat": (FIRST, "write"), "futimesat": (FIRST, "write"),
    "mknod": (FIRST, "write"), "mknodat": (FIRST, "write"), "setxattr": (FIRST, "write"),
    "lsetxattr": (FIRST, "write"), "removexattr": (FIRST, "write"),
    "lremovexattr": (FIRST, "write"), "rename": (BOTH, "write"), "renameat": (BOTH, "write"),
    "renameat2": (BOTH, "write"), "link": (BOTH, "link2"), "linkat": (BOTH, "link2"),
    "symlink": (SECOND, "write"), "symlinkat": (SECOND, "write"),
}
FORKS = {"clone", "clone3", "fork", "vfork"}
HARMLESS = {"getcwd"}  # names a path without reading it; the cwd's own reads are traced


def unquote(text):
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape") if "\\" in text else text


def resolve(base, path):
    return os.path.normpath(path if path.startswith("/") else os.path.join(base or "/", path))


class Process:
    """One traced thread: what it did to paths, whom it started, what it ran."""

    def __init__(self, tid):
        self.tid, self.children, self.cwd_at_fork = tid, [], {}
        self.argv, self.events, self.unknown = None, [], set()


def events_of(name, text, ok, errno, cwd):
    """(path, kind) for one syscall: kind 'absent', 'read', 'list', 'link', 'write' or 'both'."""
    which, does = SYSCALLS[name]
    strings, folder, flags_at = [], None, None
    for m in TOKEN.finditer(text):
        if m.group(2) is not None:
            folder = m.group(2)
            continue
        strings.append(sys.intern(resolve(folder or cwd, unquote(m.group(1)))))
        flags_at = flags_at or m.end()
        folder = None
    paths = [strings[i] for i in which if i < len(strings)]
    if not paths:
        return [], strings  # utimensat(fd, NULL, ...) acts on an open file
    looked = "read" if ok or errno not in MISSING else "absent"
    if does == "open":
        flags = text[flags_at:]
        if not ok:
            return [(paths[0], looked)], strings
        if any(f in flags for f in WRITE_FLAGS) and "O_TMPFILE" not in flags:
            # O_RDWR on a file that was there reads it too, unless O_TRUNC or O_EXCL.
            fresh = "O_TRUNC" in flags or "O_EXCL" in flags
            return [(paths[0], "both" if "O_RDWR" in flags and not fresh else "write")], strings
        return [(paths[0], "list" if "O_DIRECTORY" in flags else "read")], strings
    if does == "link":
        return [(paths[0], "link" if ok else looked)], strings
    if does == "link2" and ok and len(paths) == 2:
        return [(paths[0], "read"), (paths[1], "write")], strings
    if does == "write":
        return [(p, "write" if ok else looked) for p in paths], strings
    return [(p, looked) for p in paths], strings  # read, exec, chdir, a failed link


def read_thread(path, tid, cwd):
    """One thread's trace file: its events (time, path, kind), children, first program run."""
    proc, pending = Process(tid), None
    with open(path, encoding="latin-1") as f:
        for line in f:
            if pending:
                m = RESUMED.match(line)
                if not m or m.group(1) != pending[1]:
                    continue
                stamp, name, text, result, errno = pending[0], pending[1], pending[2] + m.group(2), m.group(3), m.group(4)
                pending = None
            else:
                m = LINE.match(line)
                if not m:
                    u = UNFINISHED.match(line.rstrip("\n"))
                    pending = u.groups() if u else None
                    continue
                stamp, name, text, result, errno = m.groups()
            ok = result != "?" and int(result) >= 0
            if name in FORKS:
                if ok and int(result) > 0:
                    proc.children.append(int(result))
                    proc.cwd_at_fork[int(result)] = cwd
                continue
            if text.startswith("AT_FDCWD<"):
                cwd = text[9:text.index(">")]  # the kernel's word on the cwd
            if name == "fchdir":
                m = TOKEN.match(text)
                if ok and m and m.group(2):
                    cwd = m.group(2)
                continue
            if name in HARMLESS:
                continue
            if name not in SYSCALLS:
                proc.unknown.add(name)
                continue
            events, strings = events_of(name, text, ok, errno, cwd)
            t = float(stamp)
            proc.events += [(t, p, kind) for p, kind in events]
            if name == "chdir" and ok and events:
                cwd = events[0][0]
            if name in ("execve", "execveat") and ok and proc.argv is None:
                proc.argv = [unquote(m.group(1)) for m in TOKEN.finditer(text) if m.group(1) is not None][1:]
    return proc


def load_trace(folder, root):
    """The traced run: every thread's file under FOLDER by thread id, read from strace's first
    process (ROOT) down, so that each child starts in the folder its parent was in."""
    files = {int(n.rsplit(".", 1)[1]): os.path.join(folder, n) for n in os.listdir(folder) if "." in n}
    procs, todo = {}, [(root, None)]
    while todo:
        tid, cwd = todo.pop()
        if tid in files and tid not in procs:
            procs[tid] = read_thread(files[tid], tid, cwd)
            todo += [(c, procs[tid].cwd_at_fork[c]) for c in procs[tid].children]
    return procs


# ---- the cache ---------------------------------------------------------------------------------

def machine():
    """What every test depends on without a syscall saying so: the installed packages (the
    kernel loads an ELF interpreter and a script's interpreter unseen), kernel, cores, rules."""
    h = hashlib.blake2b(digest_size=16)
    try:
        h.update(open("/var/lib/dpkg/status", "rb").read())
    except OSError:
        pass
    h.update(f"{os.uname().release}|{os.cpu_count()}|{VERSION}".encode())
    return h.hexdigest()


# CTest's environment. Python's bytecode files would be one test's output and another's input.
RUN_ENV = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")


def command_key(command, properties):
    """The test's command and CTest properties, and the environment CTest passes on."""
    env = sorted(f"{k}={v}" for k, v in RUN_ENV.items() if k not in VOLATILE_ENV)
    text = json.dumps([command, properties, env]).replace(CHECKOUT, "$SRC")
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def ctest_tests(ctest_args):
    """CTest's own list: (name, command, number) for the same preset."""
    out = subprocess.run(["ctest", *ctest_args, "--show-only=json-v1"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"test-cache: ctest --show-only failed: {out.stderr.strip()}")
    return [(t["name"], t.get("command") or [], i + 1, t.get("properties") or [])
            for i, t in enumerate(json.loads(out.stdout)["tests"])]


def plan(records, tests, keys, states, machine_key):
    """The test numbers to run, and the records of the tests carried over."""
    run, carried = [], {}
    for name, _, number, _ in tests:
        rec = records.get(name)
        if rec and rec["machine"] == machine_key and rec["command"] == keys[name] and all(
                states(path, how) == state for path, how, state in rec["inputs"]):
            carried[name] = rec
        else:
            run.append(number)
    return run, carried


def junit_results(path):
    results = {}
    if os.path.exists(path):
        for case in ET.parse(path).getroot().iter("testcase"):
            failed = case.find("failure") is not None or case.find("error") is not None
            skipped = case.find("skipped") is not None or case.get("status") in ("notrun", "disabled")
            results[case.get("name")] = "failed" if failed else "skipped" if skipped else "passed"
    return results


def test_roots(procs, tests):
    """Each test's first process: a child of CTest (or of its threads) running the test's command."""
    by_command = {}
    for name, command, _, _ in tests:
        if command:
            by_command.setdefault((os.path.basename(command[0]), *command[1:]), []).append(name)
    ctest = [p for p in procs.values() if p.argv and os.path.basename(p.argv[0]) == "ctest"]
    owners, todo = set(), [p.tid for p in ctest]
    while todo:  # CTest's threads: children that never ran a program of their own
        tid = todo.pop()
        owners.add(tid)
        todo += [c for c in procs[tid].children if c in procs and procs[c].argv is None and c not in owners]
    roots = {}
    for tid in owners:
        for child in procs[tid].children:
            p = procs.get(child)
            if p and p.argv:
                names = by_command.get((os.path.basename(p.argv[0]), *p.argv[1:]), [])
                for name in names:
                    roots.setdefault(name, []).append(child if len(names) == 1 else None)
    return roots


def subtree(procs, tid):
    out, todo = [], [tid]
    while todo:
        t = todo.pop()
        if t in procs:
            out.append(procs[t])
            todo += procs[t].children
    return out


def classify(events):
    """A test's inputs [(path, how, state-if-known)], or why it can't be carried over. A path's
    earliest event decides: a write makes it the test's own (and all under a folder it made);
    a lookup that found nothing makes absence the input; a read makes its state now the input,
    unless the test changed it later."""
    first, written, hows = {}, set(), {}
    for _, path, kind in sorted(events):
        first.setdefault(path, kind)
        if kind in ("write", "both"):
            written.add(path)
        elif kind in ("read", "list", "link"):
            hows.setdefault(path, set()).add({"read": "content", "list": "list", "link": "link"}[kind])
    made = {p for p, k in first.items() if k == "write"}

    def owned(path):
        while path not in ("/", ""):
            if path in made:
                return True
            path = os.path.dirname(path)
        return False

    inputs = []
    for path, kind in first.items():
        if path.startswith(VOLATILE) or owned(path):
            continue
        if kind == "both" or (kind != "absent" and path in written):
            return None, f"changes {portable(path)}, which it read"
        if kind == "absent":
            inputs.append((path, "content", "absent"))
        else:
            inputs += [(path, how, None) for how in sorted(hows[path])]
    return inputs, None


def record(procs, roots, results, records, keys, states, machine_key, commit):
    """Records for the tests that passed; for each other test that passed, why not."""
    events = {name: [e for tid in tids if tid is not None for p in subtree(procs, tid) for e in p.events]
              for name, tids in roots.items()}
    writers, readers = {}, {}
    for name, evs in events.items():
        for _, path, kind in evs:
            (writers if kind in ("write", "both") else readers).setdefault(path, set()).add(name)
    # A file one test writes and another reads: the order of the two decided what the reader saw,
    # and skipping the writer would leave the reader a stale or missing file.
    shares = {}
    for path in writers.keys() & readers.keys():
        for w in writers[path]:
            if readers[path] - {w}:
                shares.setdefault(w, f"it writes {portable(path)}, which {min(readers[path] - {w})} reads")
        for r in readers[path]:
            if writers[path] - {r}:
                shares.setdefault(r, f"it reads {portable(path)}, which {min(writers[path] - {r})} writes")
    for name, rec in list(records.items()):  # a carried test read what a test wrote this run
        if name not in results and any(local(p) in writers for p, _, _ in rec["inputs"]):
            del records[name]
    reasons = {}
    for name, status in results.items():
        records.pop(name, None)
        if status != "passed":
            continue
        tids = roots.get(name, [])
        if len(tids) != 1 or tids[0] is None:
            reasons[name] = "its processes were not told apart in the trace (no single process ran its command)"
            continue
        unknown = {u for p in subtree(procs, tids[0]) for u in p.unknown}
        inputs, reason = classify(events[name])
        if reason is None and unknown:
            reason = f"it made syscalls these rules don't read: {', '.join(sorted(unknown))}"
        reason = reason or shares.get(name)
        if reason:
            reasons[name] = reason
            continue
        records[name] = {
            "machine": machine_key, "commit": commit,
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": keys[name],
            "inputs": sorted([portable(p), how, state or states(portable(p), how)] for p, how, state in inputs),
        }
    return reasons


# ---- running -----------------------------------------------------------------------------------

def run_traced(ctest, numbers, tree):
    """CTest, running only test NUMBERS, under strace; returns CTest's exit status and the trace's
    folder. A process a test left behind (a daemon) would keep strace waiting: once CTest has
    exited, strace gets 10 s, then detaches from what is left."""
    trace, rc_file, pid_file, run_file = (os.path.join(tree, "test-cache." + n) for n in ("trace", "rc", "pid", "run"))
    shutil.rmtree(trace, ignore_errors=True)
    os.makedirs(trace)
    with open(run_file, "w") as f:
        f.write("0,0,0," + ",".join(map(str, numbers)) + "\n")
    for stale in (rc_file, pid_file):
        if os.path.exists(stale):
            os.remove(stale)
    script = 'pid_file=$1 rc_file=$2; shift 2; echo $$ > "$pid_file"; ctest "$@"; echo $? > "$rc_file"'
    tracer = subprocess.Popen(
        ["strace", "-f", "-ff", "-ttt", "-q", "--seccomp-bpf", "-y", "-s", "65536",
         "-e", "trace=%file,clone,clone3,fork,vfork,fchdir", "-o", os.path.join(trace, "t"),
         "bash", "-c", script, "bash", pid_file, rc_file, *ctest[1:], "-I", run_file], env=RUN_ENV)
    while tracer.poll() is None:
        time.sleep(0.5)
        if os.path.exists(rc_file):
            try:
                tracer.wait(timeout=10)
            except subprocess.TimeoutExpired:
                print("test-cache: processes outlived CTest; detaching from them", file=sys.stderr)
                tracer.send_signal(signal.SIGTERM)
                tracer.wait()
    try:
        return int(open(rc_file).read()), int(open(pid_file).read()), trace
    except (OSError, ValueError):
        return 1, int(open(pid_file).read()), trace


def option(args, flag):
    i = args.index(flag) if flag in args else -1
    return args[i + 1] if 0 <= i < len(args) - 1 else None


def load_cache(path):
    """The records, each test's inputs as (path, how, state); on disk they index one shared
    table, since the tests of one program read nearly the same hundreds of files."""
    try:
        cache = json.load(open(path))
        if cache.get("version") == VERSION:
            table = [tuple(entry) for entry in cache.pop("table")]
            for rec in cache["records"].values():
                rec["inputs"] = [table[i] for i in rec["inputs"]]
            return cache
    except (OSError, ValueError, KeyError, IndexError):
        pass
    return {"version": VERSION, "records": {}, "memo": {}}


def save_cache(path, cache):
    index, table, records = {}, [], {}
    for name, rec in cache["records"].items():
        ids = []
        for entry in rec["inputs"]:
            entry = tuple(entry)
            if entry not in index:
                index[entry] = len(table)
                table.append(entry)
            ids.append(index[entry])
        records[name] = dict(rec, inputs=ids)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"version": VERSION, "records": records, "table": table, "memo": cache["memo"]}, f)
    os.replace(tmp, path)


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--" or sys.argv[3] != "ctest":
        sys.exit(__doc__)
    name, ctest = sys.argv[1], sys.argv[3:]
    junit = option(ctest, "--output-junit")
    tree = os.path.abspath(option(ctest, "--test-dir") or os.path.join("build", option(ctest, "--preset") or name))
    where = [a for flag in ("--preset", "--test-dir") if option(ctest, flag) for a in (flag, option(ctest, flag))]
    others = [a for a in ctest[1:] if a not in where and a not in ("-j", "--timeout", "--output-junit")
              and option(ctest, "-j") != a and option(ctest, "--timeout") != a and a != junit]
    if not shutil.which("strace") or not junit or others:
        # A hand-picked selection (-R, -L ...) runs as asked: the records are for whole runs.
        why = f"arguments {' '.join(others)}" if others else "no strace" if junit else "no --output-junit"
        print(f"test-cache: {why}; every test asked for runs, untraced")
        sys.exit(subprocess.call(ctest))
    cache_dir = os.environ.get("MESHTEST_TEST_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "meshtest", "test-results")
    os.makedirs(cache_dir, exist_ok=True)
    cache_file = os.path.join(cache_dir, f"{name}.json")
    cache = load_cache(cache_file)
    records, states, machine_key = cache["records"], States(cache["memo"]), machine()
    tests = ctest_tests(where)
    keys = {test: command_key(command, props) for test, command, _, props in tests}
    if os.environ.get("MESHTEST_TEST_CACHE", "on") == "off":
        run, carried = [number for _, _, number, _ in tests], {}
    else:
        run, carried = plan(records, tests, keys, states, machine_key)
    with open(os.path.join(tree, "test-cache.txt"), "w") as f:
        for test, rec in sorted(carried.items()):
            f.write(f"{test}\tpassed at {rec['commit']} ({rec['when']}); nothing it reads has changed\n")
    print(f"test-cache: of {len(tests)} tests, {len(carried)} passed in an earlier run and nothing they "
          f"read has changed ({portable(tree)}/test-cache.txt); {len(run)} run now")
    if not run:
        sys.exit(0)
    start = time.time()
    rc, root, trace = run_traced(ctest, run, tree)
    ran = time.time() - start
    start = time.time()
    procs = load_trace(trace, root)
    roots = test_roots(procs, tests)
    commit = subprocess.run(["git", "-C", CHECKOUT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    reasons = record(procs, roots, junit_results(junit), records, keys, states, machine_key, commit)
    with open(os.path.join(tree, "test-cache.uncarried.txt"), "w") as f:
        f.writelines(f"{test}\t{why}\n" for test, why in sorted(reasons.items()))
    cache["memo"] = states.used  # what this run hashed: the files the records name
    save_cache(cache_file, cache)
    shutil.rmtree(trace, ignore_errors=True)
    print(f"test-cache: {len(run)} tests ran traced in {ran:.0f} s (the trace read in {time.time() - start:.0f} s); "
          f"{len(reasons)} that passed will run again next time however little changes, each for the reason "
          f"in {portable(tree)}/test-cache.uncarried.txt")
    sys.exit(rc)


if __name__ == "__main__":
    main()
