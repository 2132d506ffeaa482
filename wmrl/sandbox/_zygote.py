"""The in-sandbox worker: imports the scientific stack once, then forks one child per program.

Standalone on purpose (stdlib + numpy only): the repo is not visible inside the sandbox.
It runs as root inside the isolation so it can drop each child to the slot's unprivileged
uid; that uid makes RLIMIT_NPROC bind, cannot signal the zygote, and lets every leftover
process of an execution be swept with one kill(-1).

Protocol on stdin/stdout (host <-> zygote): frames of a 4-byte big-endian header length, a
JSON header, then the raw blobs whose byte lengths the header lists in "blobs".
  host: {"op": "data", "key", "names"} + .npy blobs  -> caches arrays under key
  host: {"op": "run", "key", "source", "limits"}      -> {"op": "need_data"} or a result
  zygote result: {"op": "result", "status", "detail", "fit_s", "predict_s", "exec_s",
                  "stdout_tail", "stderr_tail", "blobs": [n]} + raw .npy predictions
Usage: python _zygote.py '{"uid": 60000, "hide": [...], "mounts": "none"|"unshare"}'
"""
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy: one BLAS thread per slot, slots give the parallelism

import collections
import ctypes
import io
import json
import resource
import select
import shutil
import signal
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
    "sklearn.gaussian_process", "sklearn.cluster", "sklearn.feature_extraction",
)
MAX_CACHED = 8  # task arrays kept per worker (a few task/split pairs)
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36
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


def write_frame(fd, header, blobs=()):
    header = dict(header, blobs=[len(b) for b in blobs])
    h = json.dumps(header).encode()
    data = b"".join([struct.pack(">I", len(h)), h, *blobs])
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ---------------------------------------------------------------- mounts (unshare fallback only)
def _mount(src, dst, fstype, flags, data=None):
    if _libc.mount(src and src.encode(), dst.encode(), fstype and fstype.encode(), flags,
                   data and data.encode()) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {src} -> {dst}: {os.strerror(e)}")


def setup_unshare_mounts(cfg):
    """Inside a fresh mount namespace: hide paths under empty tmpfs, give /tmp its own tmpfs,
    and make every other mount read-only (the child is unprivileged, this is defence in depth)."""
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
    for p in cfg.get("hide", []):
        if os.path.isdir(p):
            _mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=0755")
    for p in ("/tmp", "/var/tmp", "/dev/shm", "/run/shm"):
        if os.path.isdir(p) and not os.path.islink(p):
            mode = "0755" if p == "/tmp" else "0000"
            _mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg.get('scratch_mb', 256)}m,mode={mode}")


# ---------------------------------------------------------------- the child (one execution)
def child_main(source, arrays, limits, scratch, result_w, out_w, err_w):
    """Never returns. Drops privileges, runs build/fit/predict, writes one result frame."""
    try:
        os.setsid()  # own process group: a timeout kills the group, not the zygote
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, result_w)
        os.closerange(result_w + 1, 65536)
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
        os.chdir(scratch)
        if limits.get("drop_uid", True):
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        os.environ.clear()
        os.environ.update({k: "1" for k in CHILD_ENV_KEEP})
        os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=scratch, TMPDIR=scratch,
                          LANG="C.UTF-8", MPLCONFIGDIR=scratch, JOBLIB_TEMP_FOLDER=scratch)
        sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), write_through=True)
        sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0), write_through=True)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    except BaseException as e:  # setup failure is the sandbox's fault
        _child_result(result_w, {"status": "infra_error", "detail": f"child setup: {e!r}"})
        os._exit(0)
    result = _run_program(source, arrays, result_w)
    _child_result(result_w, *result)
    os._exit(0)


def _run_program(source, arrays, result_w):
    import numpy as np

    X_train, y_train, X_eval = arrays
    import random

    random.seed(0)  # same program, same data -> same outcome: estimators without random_state are
    np.random.seed(0)  # reproducible, so a resumed run replays its executions exactly
    fit_s = predict_s = None
    stage = "build"
    try:
        namespace = {"__name__": "__main__", "__file__": "program.py", "__builtins__": __builtins__}
        code = compile(source, "program.py", "exec")
        exec(code, namespace)
        model = namespace["build"]()
        if not (callable(getattr(model, "fit", None)) and callable(getattr(model, "predict", None))):
            return ({"status": "no_valid_output",
                     "detail": f"build() returned {type(model).__name__}, which has no fit/predict"},)
        stage = "fit"
        t = time.perf_counter()
        model.fit(X_train, y_train)
        fit_s = time.perf_counter() - t
        stage = "predict"
        t = time.perf_counter()
        pred = model.predict(X_eval)
        predict_s = time.perf_counter() - t
    except SystemExit as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)  # hide the harness frame
        return ({"status": "runtime_error", "detail": f"sys.exit({e.code!r}) in {stage}",
                 "fit_s": fit_s, "predict_s": predict_s},)
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)  # hide the harness frame
        return ({"status": "runtime_error", "detail": f"{type(e).__name__} in {stage}: {str(e)[:200]}",
                 "fit_s": fit_s, "predict_s": predict_s},)
    times = {"fit_s": fit_s, "predict_s": predict_s}
    try:
        arr = np.asarray(pred)
        if arr.dtype.kind not in "biuf":
            arr = arr.astype(np.float64)  # e.g. a list of numbers; strings/objects fail here
        buf = io.BytesIO()
        np.lib.format.write_array(buf, arr, allow_pickle=False)
    except BaseException as e:
        return ({"status": "no_valid_output", "detail": f"predictions are not a numeric array: {str(e)[:200]}",
                 **times},)
    return {"status": "valid", "detail": "", **times}, buf.getvalue()


def _child_result(fd, header, blob=b""):
    try:
        write_frame(fd, header, [blob] if blob else [])
    except BaseException:
        pass


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


def sweep(uid, child):
    """Kill every process of `uid` and reap them all; return the wait status of `child`.

    A helper that setuid()s to `uid` sends kill(-1, SIGKILL): the kernel walks the task
    list under a lock that fork() needs, so one pass catches even a fork bomb.
    """
    status = None
    for _ in range(20):
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
        while True:  # we are the subreaper: every orphan of the execution comes back to us
            try:
                pid, st = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if pid == child:
                status = st
        if not processes_of(uid):
            break
    return status


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


def execute(header, arrays, cfg):
    drop_uid = cfg.get("drop_uid", True)
    limits = dict(header["limits"], drop_uid=drop_uid)
    uid = cfg["uid"]
    scratch = f"/tmp/run{os.getpid()}-{time.monotonic_ns()}"
    os.mkdir(scratch, 0o700)
    if drop_uid:
        os.chown(scratch, uid, uid)
    pipes = [os.pipe() for _ in range(3)]  # result, stdout, stderr
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        child_main(header["source"], arrays, limits, scratch, pipes[0][1], pipes[1][1], pipes[2][1])
    for _, w in pipes:
        os.close(w)
    readers = [r for r, _ in pipes]
    for r in readers:
        os.set_blocking(r, False)
    result = bytearray()
    result_cap = (limits["prediction_cap_mb"] << 20) + 65536  # + the result header
    tails = {readers[1]: Tail(limits["output_cap"]), readers[2]: Tail(limits["output_cap"])}
    pidfd = os.pidfd_open(pid)
    deadline = t0 + limits["wall_s"]
    timed_out = too_big = False
    open_fds = set(readers)
    exited = False
    while not exited:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select(list(open_fds) + [pidfd], [], [], left)
        for fd in ready:
            if fd == pidfd:
                exited = True
                continue
            _drain(fd, open_fds, tails, result, result_cap)
        if len(result) > result_cap:
            too_big = True
            break
    exec_s = time.monotonic() - t0
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
        wstatus = os.waitpid(pid, 0)[1]
    os.close(pidfd)
    for fd in list(open_fds):  # what was written before the end still counts
        _drain(fd, open_fds, tails, result, result_cap)
    for r in readers:
        os.close(r)
    shutil.rmtree(scratch, ignore_errors=True)

    out = {"stdout_tail": tails[readers[1]].text(), "stderr_tail": tails[readers[2]].text(),
           "exec_s": exec_s, "fit_s": None, "predict_s": None}
    blob = b""
    if timed_out:
        out.update(status="timeout", detail=f"no result within {limits['wall_s']:.1f} s")
    elif too_big:
        out.update(status="no_valid_output", detail="predictions larger than the cap")
    else:
        try:
            (hlen,) = struct.unpack(">I", bytes(result[:4]))
            child = json.loads(bytes(result[4:4 + hlen]))
            sizes = child.get("blobs", [])
            blob = bytes(result[4 + hlen:4 + hlen + sum(sizes)])
            if len(blob) != sum(sizes):
                raise ValueError("truncated predictions")
            status = child.get("status")
            if status not in ("valid", "runtime_error", "no_valid_output", "infra_error"):
                raise ValueError(f"unknown status {status!r}")
            out.update(status=status, detail=str(child.get("detail", ""))[:500],
                       fit_s=_num(child.get("fit_s")), predict_s=_num(child.get("predict_s")))
        except Exception as e:
            blob = b""
            if os.WIFSIGNALED(wstatus):
                sig = os.WTERMSIG(wstatus)
                name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
                detail = f"killed by signal {name}"
                if sig == signal.SIGXCPU:
                    detail += " (CPU-time limit)"
            elif os.WIFEXITED(wstatus) and len(result) == 0:
                detail = f"exited with code {os.WEXITSTATUS(wstatus)} before reporting a result"
            else:
                detail = f"no readable result: {e}"
            out.update(status="runtime_error", detail=detail)
    return out, ([blob] if blob else [])


def _num(x):
    return float(x) if isinstance(x, (int, float)) else None


def _drain(fd, open_fds, tails, result, result_cap):
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
        else:
            if len(result) <= result_cap:
                result.extend(b)
            else:
                return


# ---------------------------------------------------------------- main loop
def main():
    cfg = json.loads(sys.argv[1])
    if cfg.get("mounts") == "unshare":
        setup_unshare_mounts(cfg)
    proto_in, proto_out = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)  # stray prints from imports must not corrupt the protocol
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    saved_filters = warnings.filters[:]
    warnings.simplefilter("ignore")
    import numpy as np
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    warnings.filters[:] = saved_filters
    cache = collections.OrderedDict()
    write_frame(proto_out, {"op": "ready", "pid": os.getpid()})
    while True:
        try:
            header, blobs = read_frame(proto_in)
        except EOFError:
            return
        op = header.get("op")
        if op == "data":
            cache[header["key"]] = tuple(np.load(io.BytesIO(b), allow_pickle=False) for b in blobs)
            while len(cache) > MAX_CACHED:
                cache.popitem(last=False)
            write_frame(proto_out, {"op": "ok"})
        elif op == "run":
            arrays = cache.get(header["key"])
            if arrays is None:
                write_frame(proto_out, {"op": "need_data"})
                continue
            cache.move_to_end(header["key"])
            out, out_blobs = execute(header, arrays, cfg)
            write_frame(proto_out, dict(out, op="result"), out_blobs)
        elif op == "ping":
            write_frame(proto_out, {"op": "pong"})
        else:
            write_frame(proto_out, {"op": "error", "detail": f"unknown op {op!r}"})


if __name__ == "__main__":
    main()
