"""The in-sandbox worker: imports the scientific stack once, then runs each program in a fresh child.

Standalone on purpose (stdlib, numpy and pyseccomp only): the repo is not visible inside the sandbox.
Three kinds of process, so that a program can neither forge a verdict nor see anything but its own input:
- the zygote (root inside the isolation) speaks the host protocol, caches task arrays as bytes and
  supervises each execution: it alone measures time and decides the status, including infra_error;
- the template, forked right after the imports and before any task data or program arrived, forks
  one child per execution, so a child inherits the warm imports and nothing else;
- the child: a fresh IPC namespace, rlimits, the slot's unprivileged uid, a seccomp filter, then
  its own source and arrays read from a pipe, build/fit/predict, one result frame.
The uid makes RLIMIT_NPROC bind, cannot signal the zygote, and lets every leftover process of an
execution be swept with one kill(-1).

Two interfaces. estimator: the child calls build().fit(X_train, y_train) then `method` (predict or
predict_proba) on X_eval; arrays come as .npy, tables as Parquet (pandas, never pickle). script: the
task's public files are written read-only into ./input/ of the execution's scratch folder, the
program runs as __main__ there, and after every process of it is gone the zygote reads
./submission/submission.csv (a regular file, links refused, size capped) and returns its bytes
for the host to grade; answers never reach the sandbox.

Protocol on stdin/stdout (host <-> zygote): frames of a 4-byte big-endian header length, a
JSON header, then the raw blobs whose byte lengths the header lists in "blobs".
  host: {"op": "data", "key", "names"?} + blobs     -> caches the bytes under key (names: script input files)
  host: {"op": "run", "key", "source", "limits", "interface", "method"}  -> {"op": "need_data"} or a result
  zygote result: {"op": "result", "status", "detail", "fit_s", "predict_s", "exec_s",
                  "stdout_tail", "stderr_tail", "blobs": [n]} + raw .npy predictions (or submission bytes)
Child -> zygote: one-byte marks the zygote timestamps (S set up, B built, F fitted, P predicted)
and one result frame {"status", "detail"} + .npy predictions; nothing else in it is trusted.
Usage: python _zygote.py '{"uid": 60000, "hide": [...], "mounts": "none"|"unshare", ...}'
"""
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy: one BLAS thread per slot, slots give the parallelism

import collections
import ctypes
import errno
import io
import json
import resource
import select
import shutil
import signal
import socket
import struct
import time
import traceback
import warnings

CHILD_ENV_KEEP = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                  "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS")
PRELOAD = (
    "numpy", "scipy", "scipy.sparse", "scipy.stats", "scipy.optimize", "scipy.linalg", "pandas",
    "sklearn", "sklearn.base", "sklearn.ensemble", "sklearn.linear_model", "sklearn.tree", "sklearn.neighbors",
    "sklearn.svm", "sklearn.preprocessing", "sklearn.pipeline", "sklearn.model_selection", "sklearn.metrics",
    "sklearn.naive_bayes", "sklearn.decomposition", "sklearn.impute", "sklearn.compose",
    "sklearn.feature_selection", "sklearn.neural_network", "sklearn.discriminant_analysis",
    "sklearn.kernel_approximation", "sklearn.dummy", "sklearn.calibration", "sklearn.multiclass",
    "sklearn.gaussian_process", "sklearn.cluster", "sklearn.feature_extraction", "pyarrow", "pyarrow.parquet",
)
SUBMISSION = ("submission", "submission.csv")  # where a script program writes, relative to its folder
MAX_CACHED = 8  # task arrays kept per worker (a few task/split pairs), as bytes: children never inherit them
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36
CLONE_NEWIPC = 0x08000000
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
# Calls a fit never needs and that reach beyond the execution: kernel keyrings (they outlive it),
# namespaces (a user namespace undoes the uid drop), tracing, mounts, eBPF, perf, kernel modules,
# io_uring (its requests bypass this filter), other processes' memory, clocks, swap, reboot.
DENIED_SYSCALLS = (
    "keyctl", "add_key", "request_key", "unshare", "setns", "ptrace", "process_vm_readv", "process_vm_writev",
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsmount", "fsconfig", "fspick", "move_mount",
    "open_tree", "mount_setattr", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at", "fanotify_init", "lookup_dcookie", "quotactl", "syslog", "acct",
    "swapon", "swapoff", "reboot", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup",
    "mbind", "migrate_pages", "move_pages", "set_mempolicy",
)
MARKS = b"SBFP"  # set up, built, fitted, predicted
CHILD_STATUSES = ("valid", "runtime_error", "no_valid_output")  # all a program can claim about itself
_libc = ctypes.CDLL(None, use_errno=True)


# ---------------------------------------------------------------- framing
def read_exact(fd, n):
    chunks, got = [], 0
    while got < n:
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            raise EOFError("host closed the pipe")
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read_frame(fd):
    (hlen,) = struct.unpack(">I", read_exact(fd, 4))
    header = json.loads(read_exact(fd, hlen))
    return header, [read_exact(fd, n) for n in header.get("blobs", [])]


def encode_frame(header, blobs=()):
    h = json.dumps(dict(header, blobs=[len(b) for b in blobs])).encode()
    return b"".join([struct.pack(">I", len(h)), h, *blobs])


def write_frame(fd, header, blobs=()):
    view = memoryview(encode_frame(header, blobs))
    while view:
        view = view[os.write(fd, view):]


# ---------------------------------------------------------------- mounts (unshare fallback only)
def _mount(src, dst, fstype, flags, data=None):
    if _libc.mount(src and src.encode(), dst.encode(), fstype and fstype.encode(), flags,
                   data and data.encode()) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {src} -> {dst}: {os.strerror(e)}")


def setup_unshare_mounts(cfg):
    """Inside a fresh mount namespace: cover secret places with empty tmpfs (re-exposing the Python
    environment where it lives inside one, e.g. a venv in a home directory), hide dataset copies,
    give /tmp its own tmpfs, and make every other mount read-only."""
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for p in sorted(set(points)):
        if p.startswith(("/proc", "/sys", "/dev")):
            continue
        try:
            _mount(p, p, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        except OSError:
            pass  # some special mounts refuse; they stay as the DAC lets them be
    # O_PATH handles keep the environment reachable after its parent is covered
    handles = {r: os.open(r, os.O_PATH | os.O_DIRECTORY) for r in cfg.get("expose", []) if os.path.isdir(r)}
    covered = []
    for p in cfg.get("cover", []):
        if os.path.isdir(p):  # not when an earlier cover already emptied its parent
            _mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
            covered.append(p)
    # scratch before re-exposing: an environment under /tmp (a CI venv) is bound on top of the new tmpfs
    for p in ("/tmp", "/var/tmp", "/dev/shm", "/run/shm"):
        if os.path.isdir(p) and not os.path.islink(p):
            mode = "0755" if p == "/tmp" else "0000"
            _mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg.get('scratch_mb', 256)}m,mode={mode}")
    for r, fd in handles.items():
        os.makedirs(r, mode=0o755, exist_ok=True)  # inside the covering tmpfs
        _mount(f"/proc/self/fd/{fd}", r, None, MS_BIND | MS_REC)
        _mount(None, r, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        os.close(fd)
    for p in covered:
        if p.startswith(("/tmp/", "/var/tmp/")):
            continue  # gone under the scratch tmpfs mounted since
        _mount(None, p, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
    for p in cfg.get("hide", []):
        if os.path.isdir(p):
            _mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=0755")
        elif os.path.isfile(p):
            _mount("/dev/null", p, None, MS_BIND)


# ---------------------------------------------------------------- seccomp
def build_filter():
    """(filter, "") or (None, why): denies the calls above with EPERM, clone() with any namespace
    flag, and clone3 with ENOSYS (its flags are out of a filter's reach; libc falls back to clone)."""
    try:
        import pyseccomp as sc
    except Exception as e:  # noqa: BLE001 - any import failure means "no filter", reported to the host
        return None, f"pyseccomp unavailable: {e!r}"
    try:
        f = sc.SyscallFilter(sc.ALLOW)
        deny = sc.ERRNO(errno.EPERM)
        for name in DENIED_SYSCALLS:
            try:
                f.add_rule(deny, name)
            except (ValueError, OSError):  # a call this kernel/arch does not have
                pass
        for flag in NAMESPACE_FLAGS:
            f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        return f, ""
    except Exception as e:  # noqa: BLE001
        return None, f"seccomp filter could not be built: {e!r}"


# ---------------------------------------------------------------- the child (one execution)
def child_main(spec, fds, seccomp_filter):
    """Never returns. Sets up the walls, reads its own input, runs build/fit/predict, writes one frame."""
    data_r, result_w, out_w, err_w, marks_w = fds
    limits = spec["limits"]
    try:
        os.setsid()  # own process group: a timeout kills the group, not the zygote
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        keep = sorted({data_r, result_w, marks_w})
        low = 3
        for fd in keep:
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 65536)
        if limits["drop_uid"]:  # root here: a private IPC namespace, gone when the execution's last process is
            if _libc.unshare(CLONE_NEWIPC) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWIPC)")
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")  # under the slot's memory limit the program goes first, never the zygote
        except OSError:
            pass
        uid = limits["uid"]
        cpu = int(limits["cpu_s"])
        mem = limits["memory_mb"] << 20
        for res, soft, hard in (
            (resource.RLIMIT_AS, mem, mem),
            (resource.RLIMIT_CPU, cpu, cpu + 1),
            (resource.RLIMIT_FSIZE, limits["max_file_mb"] << 20, limits["max_file_mb"] << 20),
            (resource.RLIMIT_NOFILE, 256, 256),
            (resource.RLIMIT_NPROC, limits["max_procs"], limits["max_procs"]),
            (resource.RLIMIT_CORE, 0, 0),
        ):
            if soft > 0:  # 0: not enforced (RLIMIT_NPROC without a private uid would count the host user)
                resource.setrlimit(res, (soft, hard))
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries cannot regain root
        os.chdir(spec["scratch"])
        if limits["drop_uid"]:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        os.environ.clear()
        os.environ.update({k: "1" for k in CHILD_ENV_KEEP})
        os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=spec["scratch"], TMPDIR=spec["scratch"],
                          LANG="C.UTF-8", MPLCONFIGDIR=spec["scratch"], JOBLIB_TEMP_FOLDER=spec["scratch"])
        if seccomp_filter is not None:
            seccomp_filter.load()  # last: nothing of the set-up above is denied
        os.write(marks_w, b"S")
    except BaseException as e:  # no S mark: the zygote calls it the sandbox's failure
        try:
            os.write(2, f"[sandbox] child setup failed: {e!r}\n".encode())
        finally:
            os._exit(3)
    try:
        header, blobs = read_frame(data_r)
        os.close(data_r)
        sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), write_through=True)
        sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0), write_through=True)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    except BaseException:
        os._exit(4)  # the zygote sees no result frame and no death by signal: it knows what it sent
    if spec.get("interface") == "script":
        result = _run_script(header["source"], marks_w)
    else:
        result = _run_program(header["source"], blobs, marks_w, spec.get("method", "predict"))
    try:
        write_frame(result_w, *result)
    except BaseException:
        pass
    os._exit(0)


def _load(blob):
    """An array (.npy) or a table (Parquet: column names and dtypes kept); neither format can pickle."""
    import numpy as np

    if blob[:4] == b"PAR1":
        import pandas as pd

        return pd.read_parquet(io.BytesIO(blob))
    return np.load(io.BytesIO(blob), allow_pickle=False)


def _run_script(source, marks_w):
    """Runs a whole program in its folder; its output is the submission file, read by the zygote."""
    import numpy as np
    import random

    random.seed(0)
    np.random.seed(0)
    try:
        namespace = {"__name__": "__main__", "__file__": "program.py", "__builtins__": __builtins__}
        code = compile(source, "program.py", "exec")
        del source
        os.write(marks_w, b"B")
        exec(code, namespace)
        os.write(marks_w, b"F")
    except SystemExit as e:
        if e.code in (None, 0):  # a script may end itself; success is success
            os.write(marks_w, b"F")
            return ({"status": "valid", "detail": ""},)
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        return ({"status": "runtime_error", "detail": f"sys.exit({e.code!r})"},)
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)  # hide the harness frame
        return ({"status": "runtime_error", "detail": f"{type(e).__name__}: {str(e)[:200]}"},)
    return ({"status": "valid", "detail": ""},)


def _run_program(source, blobs, marks_w, method="predict"):
    import numpy as np

    X_train, y_train, X_eval = (_load(b) for b in blobs)
    del blobs
    import random

    random.seed(0)  # same program, same data -> same outcome: estimators without random_state are
    np.random.seed(0)  # reproducible, so a resumed run replays its executions exactly
    stage = "build"
    try:
        namespace = {"__name__": "__main__", "__file__": "program.py", "__builtins__": __builtins__}
        code = compile(source, "program.py", "exec")
        del source
        exec(code, namespace)
        model = namespace["build"]()
        if not (callable(getattr(model, "fit", None)) and callable(getattr(model, method, None))):
            return ({"status": "no_valid_output",
                     "detail": f"build() returned {type(model).__name__}, which has no fit/{method}"},)
        stage = "fit"
        os.write(marks_w, b"B")
        model.fit(X_train, y_train)
        os.write(marks_w, b"F")
        stage = "predict"
        pred = getattr(model, method)(X_eval)
        os.write(marks_w, b"P")
    except SystemExit as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)  # hide the harness frame
        return ({"status": "runtime_error", "detail": f"sys.exit({e.code!r}) in {stage}"},)
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)  # hide the harness frame
        return ({"status": "runtime_error", "detail": f"{type(e).__name__} in {stage}: {str(e)[:200]}"},)
    try:
        arr = np.asarray(pred)
        if arr.dtype.kind not in "biuf" or arr.dtype.fields is not None:  # no complex, text or objects
            return ({"status": "no_valid_output", "detail": f"predictions are not real numbers (dtype {arr.dtype})"},)
        buf = io.BytesIO()
        np.lib.format.write_array(buf, arr, allow_pickle=False)
    except BaseException as e:
        return ({"status": "no_valid_output", "detail": f"predictions are not a numeric array: {str(e)[:200]}"},)
    return {"status": "valid", "detail": ""}, [buf.getvalue()]


# ---------------------------------------------------------------- the template
def template_main(sock, seccomp_filter):
    """Forks one child per request and holds nothing else: it was forked before any task data or
    program reached the zygote, so that is all a child can inherit."""
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 8)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        spec = json.loads(msg)
        pid = os.fork()
        if pid == 0:  # an intermediate: its child is orphaned to the zygote (the subreaper), which reaps it
            child = os.fork()
            if child == 0:
                sock.close()
                child_main(spec, fds, seccomp_filter)
            try:
                sock.send(json.dumps({"pid": child}).encode())
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        os.waitpid(pid, 0)


class Template:
    """The zygote's handle on its template process."""

    def __init__(self, seccomp_filter):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            ours.close()
            try:
                template_main(theirs, seccomp_filter)
            finally:
                os._exit(0)
        theirs.close()
        self.sock = ours

    def spawn(self, spec, fds, timeout_s=30.0):
        """Pid of a new child running `spec` with the given pipe ends."""
        socket.send_fds(self.sock, [json.dumps(spec).encode()], fds)
        self.sock.settimeout(timeout_s)
        msg = self.sock.recv(4096)
        if not msg:
            raise RuntimeError("template process is gone")
        return json.loads(msg)["pid"]


# ---------------------------------------------------------------- the zygote side of one execution
class Tail:
    """Keeps the last `cap` bytes of a stream; the rest is dropped as it arrives."""

    def __init__(self, cap):
        self.cap, self.buf, self.size, self.dropped = cap, collections.deque(), 0, 0

    def add(self, b):
        self.buf.append(b)
        self.size += len(b)
        while self.size - len(self.buf[0]) >= self.cap:
            self.dropped += len(self.buf[0])
            self.size -= len(self.buf.popleft())

    def text(self):
        data = b"".join(self.buf)[-self.cap:]
        return data.decode("utf-8", "replace")


def sweep(uid, child, deadline_s=10.0):
    """Kill every process of `uid`, reap them all; return the wait status of `child`.

    A helper that setuid()s to `uid` sends kill(-1, SIGKILL): the kernel walks the task
    list under a lock that fork() needs, so one pass catches even a fork bomb. The template is
    also our child, so reaping never blocks.
    """
    status = None
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        helper = os.fork()
        if helper == 0:
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(helper, 0)
        status = _reap(child, status)
        if status is not None and not processes_of(uid):
            break
        time.sleep(0.002)  # killed processes are still being torn down
    return status


def _reap(child, status):
    """Reap every exited orphan (we are the subreaper); the status of `child` once it is among them."""
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == child:
            status = st


def processes_of(uid):
    """Pids owned by `uid` that are visible here (the sandbox's pid namespace)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    out.append(int(name))
            except OSError:
                pass
    return out


def write_inputs(scratch, names, blobs, uid, drop_uid):
    """A script's folder: ./input/ read-only (root's, 0755, files 0444), ./submission/ its own."""
    inp = os.path.join(scratch, "input")
    os.mkdir(inp, 0o755)
    for name, blob in zip(names, blobs):
        if os.sep in name or name in ("", ".", ".."):
            raise ValueError(f"bad input file name {name!r}")
        fd = os.open(os.path.join(inp, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
    out = os.path.join(scratch, SUBMISSION[0])
    os.mkdir(out, 0o755)
    if drop_uid:
        os.chown(out, uid, uid)


def read_submission(scratch, cap):
    """(bytes, "") of the script's submission, or (None, why). Opened without following links, after
    every process of the program is gone, so it is a plain file the program wrote in its folder."""
    try:
        dfd = os.open(os.path.join(scratch, SUBMISSION[0]), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None, f"no ./{'/'.join(SUBMISSION)} written (the folder ./{SUBMISSION[0]}/ is gone)"
    try:
        fd = os.open(SUBMISSION[1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except FileNotFoundError:
        return None, f"no ./{'/'.join(SUBMISSION)} written"
    except OSError as e:
        return None, f"./{'/'.join(SUBMISSION)} cannot be read: {os.strerror(e.errno)}"
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000):
            return None, f"./{'/'.join(SUBMISSION)} is not a regular file"
        if st.st_size > cap:
            return None, f"./{'/'.join(SUBMISSION)} is larger than {cap >> 20} MiB"
        data = b""
        while len(data) <= cap:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            data += b
        return (data, "") if len(data) <= cap else (None, f"./{'/'.join(SUBMISSION)} is larger than {cap >> 20} MiB")
    finally:
        os.close(fd)


def execute(header, blobs, cfg, template, names=None):
    drop_uid = cfg.get("drop_uid", True)
    limits = dict(header["limits"], drop_uid=drop_uid)
    uid = cfg["uid"]
    script = header.get("interface") == "script"
    scratch = f"/tmp/run{os.getpid()}-{time.monotonic_ns()}"
    os.mkdir(scratch, 0o700)
    if drop_uid:
        os.chown(scratch, uid, uid)
    if script:
        write_inputs(scratch, names or [], blobs, uid, drop_uid)
        blobs = []  # the program reads its files, not a pipe
    data_r, data_w = os.pipe()
    (result_r, result_w), (out_r, out_w), (err_r, err_w), (marks_r, marks_w) = (os.pipe() for _ in range(4))
    child_ends = [data_r, result_w, out_w, err_w, marks_w]
    t0 = time.monotonic()
    try:
        pid = template.spawn({"limits": limits, "scratch": scratch, "interface": header.get("interface", "estimator"),
                              "method": header.get("method", "predict")}, child_ends)
    finally:
        for fd in child_ends:
            os.close(fd)
    pending = memoryview(encode_frame({"source": header["source"]}, blobs))
    for fd in (data_w, result_r, out_r, err_r, marks_r):
        os.set_blocking(fd, False)
    result = bytearray()
    result_cap = (limits["prediction_cap_mb"] << 20) + 65536  # + the result header
    tails = {out_r: Tail(limits["output_cap"]), err_r: Tail(limits["output_cap"])}
    marks = {}
    pidfd = os.pidfd_open(pid)
    deadline = t0 + limits["wall_s"]
    timed_out = too_big = exited = False
    open_fds = {result_r, out_r, err_r, marks_r}
    while not exited:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        writers = [data_w] if data_w is not None else []
        ready, writable, _ = select.select(list(open_fds) + [pidfd], writers, [], left)
        now = time.monotonic()
        if writable:
            try:
                pending = pending[os.write(data_w, pending):]
            except BlockingIOError:
                pass
            except OSError:  # the child is gone before reading its input
                pending = pending[:0]
            if not pending:
                os.close(data_w)
                data_w = None
        for fd in ready:
            if fd == pidfd:
                exited = True
            elif fd == marks_r:
                _read_marks(fd, open_fds, marks, now)
            else:
                _drain(fd, open_fds, tails, result, result_r, result_cap)
        if len(result) > result_cap:
            too_big = True
            break
    end = time.monotonic()
    exec_s = end - t0
    try:
        os.kill(pid, signal.SIGKILL)  # as root: works even if the child never dropped privileges
    except ProcessLookupError:
        pass
    if drop_uid:
        wstatus = sweep(uid, pid) or 0
    else:  # no private uid (isolation=none as a normal user): the process group is all we can reach
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        wstatus = _wait_orphan(pid)
    os.close(pidfd)
    for fd in list(open_fds):  # what was written before the end still counts
        if fd == marks_r:
            _read_marks(fd, open_fds, marks, end)
        else:
            _drain(fd, open_fds, tails, result, result_r, result_cap)
    for fd in (result_r, out_r, err_r, marks_r) + ((data_w,) if data_w is not None else ()):
        os.close(fd)
    out, out_blobs = judge(limits, marks, result, wstatus, exec_s, timed_out, too_big, tails[out_r], tails[err_r],
                           script=script)
    if script and out["status"] == "valid":
        data, why = read_submission(scratch, limits["prediction_cap_mb"] << 20)
        if data is None:
            out.update(status="no_valid_output", detail=why)
        else:
            out_blobs = [data]
    shutil.rmtree(scratch, ignore_errors=True)
    return out, out_blobs


def judge(limits, marks, result, wstatus, exec_s, timed_out, too_big, out_tail, err_tail, script=False):
    """The zygote's verdict. Times come from the zygote's clock at the child's marks, never from the
    program; infra_error only when the child never finished its set-up."""
    fit_s = predict_s = None
    if "B" in marks and "F" in marks and marks["B"] <= marks["F"]:
        fit_s = marks["F"] - marks["B"]
        if "P" in marks and marks["F"] <= marks["P"]:
            predict_s = marks["P"] - marks["F"]
    out = {"stdout_tail": out_tail.text(), "stderr_tail": err_tail.text(), "exec_s": exec_s,
           "fit_s": fit_s, "predict_s": predict_s}
    blob = b""
    if "S" not in marks:
        out.update(status="infra_error", detail=f"the child was not set up: {err_tail.text()[-300:]}",
                   fit_s=None, predict_s=None)
    elif timed_out:
        out.update(status="timeout", detail=f"no result within {limits['wall_s']:.1f} s")
    elif too_big:
        out.update(status="no_valid_output", detail="predictions larger than the cap")
    else:
        try:
            (hlen,) = struct.unpack(">I", bytes(result[:4]))
            child = json.loads(bytes(result[4:4 + hlen]))
            status = child.get("status")
            if status not in CHILD_STATUSES:
                raise ValueError(f"a program cannot report status {status!r}")
            sizes = child.get("blobs", [])
            if not isinstance(sizes, list) or not all(isinstance(n, int) and n >= 0 for n in sizes):
                raise ValueError("malformed blob sizes")
            blob = bytes(result[4 + hlen:4 + hlen + sum(sizes)])
            if len(blob) != sum(sizes) or (status == "valid" and not blob and not script):
                raise ValueError("truncated predictions")
            out.update(status=status, detail=str(child.get("detail", ""))[:500])
            if status != "valid":
                blob = b""
        except Exception as e:
            blob = b""
            if os.WIFSIGNALED(wstatus):
                sig = os.WTERMSIG(wstatus)
                name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
                detail = f"killed by signal {name}"
                if sig == signal.SIGXCPU:
                    detail += " (CPU-time limit)"
                elif sig == signal.SIGKILL:
                    detail += " (memory or process limit, or the program itself)"
            elif os.WIFEXITED(wstatus) and len(result) == 0:
                detail = f"exited with code {os.WEXITSTATUS(wstatus)} before reporting a result"
            else:
                detail = f"no readable result: {e}"
            out.update(status="runtime_error", detail=detail)
    return out, ([blob] if blob else [])


def _wait_orphan(pid, timeout_s=10.0):
    """Wait status of `pid`, which becomes our child once its short-lived parent (the intermediate) exits."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            got, st = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                return st
        except ChildProcessError:
            pass  # not reparented to us yet
        time.sleep(0.001)
    return 0


def _read_marks(fd, open_fds, marks, now):
    while True:
        try:
            b = os.read(fd, 4096)
        except BlockingIOError:
            return
        if not b:
            open_fds.discard(fd)
            return
        for m in b:
            if m in MARKS:
                marks.setdefault(chr(m), now)  # the first of each: later forgeries change nothing


def _drain(fd, open_fds, tails, result, result_fd, result_cap):
    while True:
        try:
            b = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not b:
            open_fds.discard(fd)
            return
        if fd in tails:
            tails[fd].add(b)
        elif fd == result_fd and len(result) <= result_cap:
            result.extend(b)
        else:
            return


# ---------------------------------------------------------------- main loop
def main():
    cfg = json.loads(sys.argv[1])
    if cfg.get("mounts") == "unshare":
        setup_unshare_mounts(cfg)
    if cfg.get("probe"):  # can the slot uid reach the environment through these mounts?
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
        import numpy  # noqa: F401
        import sklearn  # noqa: F401
        print("probe-ok", flush=True)
        return
    proto_in, proto_out = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)  # stray prints from imports must not corrupt the protocol
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")  # the slot's memory limit kills a program, not the worker that judges it
    except OSError:
        pass
    saved_filters = warnings.filters[:]
    warnings.simplefilter("ignore")
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    warnings.filters[:] = saved_filters
    seccomp_filter, seccomp_why = build_filter()
    template = Template(seccomp_filter)  # before any task data or program arrives
    cache = collections.OrderedDict()
    write_frame(proto_out, {"op": "ready", "pid": os.getpid(), "seccomp": seccomp_why or "on"})
    while True:
        try:
            header, blobs = read_frame(proto_in)
        except EOFError:
            return
        op = header.get("op")
        if op == "data":
            cache[header["key"]] = (blobs, header.get("names"))
            while len(cache) > MAX_CACHED:
                cache.popitem(last=False)
            write_frame(proto_out, {"op": "ok"})
        elif op == "run":
            entry = cache.get(header["key"])
            if entry is None:
                write_frame(proto_out, {"op": "need_data"})
                continue
            cache.move_to_end(header["key"])
            try:
                out, out_blobs = execute(header, entry[0], cfg, template, names=entry[1])
            except OSError as e:  # e.g. the scratch tmpfs is full: the sandbox's failure, retried elsewhere
                out, out_blobs = {"status": "infra_error", "detail": f"cannot prepare the execution: {e}"}, []
            write_frame(proto_out, dict(out, op="result"), out_blobs)
        elif op == "ping":
            write_frame(proto_out, {"op": "pong"})
        else:
            write_frame(proto_out, {"op": "error", "detail": f"unknown op {op!r}"})


if __name__ == "__main__":
    main()
