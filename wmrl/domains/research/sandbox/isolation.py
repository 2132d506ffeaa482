"""How a worker is walled off: detecting what this machine allows and building the command.

`bwrap` builds a new root from read-only binds of the system and the Python environment
only, so the repo, run directories and host cache are simply absent; `unshare` reuses the
host tree in a fresh mount namespace, made read-only with the secret paths covered by tmpfs.
Both add no network, a private pid/ipc/uts namespace and a private tmpfs /tmp for scratch.
"""
from __future__ import annotations

import functools
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import wmrl

ZYGOTE = Path(__file__).resolve().parent / "_zygote.py"
ZYGOTE_IN_SANDBOX = "/opt/wmrl/zygote.py"
ETC_ESSENTIALS = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "passwd", "group",
                  "hosts", "host.conf", "alternatives", "mime.types", "ssl/certs")
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt/conda")
MODES = ("bwrap", "unshare", "none")
UID_BASE = 60000  # slot k runs its programs as uid UID_BASE + k


class IsolationUnavailable(RuntimeError):
    """The requested isolation cannot be set up on this machine."""


def python_roots() -> list[str]:
    """Directories the sandboxed interpreter needs: its prefixes (a venv and the interpreter it was
    made from) and the scientific packages."""
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    for mod in ("numpy", "scipy", "sklearn", "pandas", "pyarrow", "joblib", "threadpoolctl", "pyseccomp"):
        spec = importlib.util.find_spec(mod)
        if spec and spec.origin:
            roots.add(os.path.realpath(Path(spec.origin).parent.parent))
    roots.add(os.path.realpath(Path(sys.executable).parent))
    kept = []
    for r in sorted(roots, key=len):  # drop roots nested in one already kept
        if not any(r == k or r.startswith(k + os.sep) for k in kept) and not _under_system(r):
            kept.append(r)
    return kept


def interpreter() -> str:
    """The host's own interpreter, venv included: its directory resolved, its name not, because a
    venv's `bin/python` is a symlink and Python finds the venv (pyvenv.cfg) from the unresolved path."""
    return os.path.join(os.path.realpath(os.path.dirname(sys.executable)), os.path.basename(sys.executable))


def _under_system(path: str) -> bool:
    return any(path == d or path.startswith(d + os.sep) for d in ("/usr", "/lib", "/lib64", "/bin"))


# Copies of the public datasets behind built-in tasks, by file name: scikit-learn's bundled data,
# and the same data shipped as test fixtures of other packages (e.g. scipy's iris.txt / iris.arff).
_DATASET_FILE = re.compile(r"(iris|wine|breast_cancer|wdbc|digits|diabetes)[^/]*\.(csv|txt|arff|data|rst|npz|npy|"
                           r"json|dat|tsv|parquet|pkl)(\.(gz|bz2|xz|zip))?$", re.IGNORECASE)
_SKLEARN_DATA_DIRS = ("data", "descr", "images")


def _search_roots() -> list[str]:
    """Every Python installation a program could reach inside the sandbox."""
    found = set(python_roots())
    for pattern in ("/usr/lib/python3*", "/usr/local/lib/python3*", "/usr/share/python*", "/opt/conda/lib/python3*"):
        found.update(os.path.realpath(p) for p in glob.glob(pattern) if os.path.isdir(p))
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            found.add(os.path.realpath(entry))
    kept = []
    for r in sorted(found, key=len):
        if not any(r == k or r.startswith(k + os.sep) for k in kept):
            kept.append(r)
    return kept


@functools.lru_cache(maxsize=None)
def hidden_paths() -> tuple[str, ...]:
    """Paths a program must not read although their parent is visible: every copy of the public
    datasets behind built-in tasks (they would give away held-out labels), wherever an installation
    keeps it: scikit-learn's dataset directories, and single files elsewhere. Found once per process."""
    dirs, files = [], []
    for root in _search_roots():
        for d, subdirs, names in os.walk(root):
            if os.path.basename(d) == "datasets" and os.path.basename(os.path.dirname(d)) == "sklearn":
                for sub in _SKLEARN_DATA_DIRS:
                    if sub in subdirs:
                        dirs.append(os.path.join(d, sub))
                subdirs[:] = [s for s in subdirs if s not in _SKLEARN_DATA_DIRS]  # covered as a whole
            files += [os.path.join(d, n) for n in names if _DATASET_FILE.search(n)]
    return tuple(sorted(set(dirs))) + tuple(sorted(set(files)))


@functools.lru_cache(maxsize=None)
def _works(mode: str) -> tuple[bool, str]:
    """Try the mode for real once (a no-op program inside it); the answer is cached."""
    argv = command(mode, {"uid": UID_BASE}, probe=True)
    try:
        r = subprocess.run(argv, capture_output=True, timeout=30, env=_base_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    ok = r.returncode == 0 and b"probe-ok" in r.stdout
    return ok, "" if ok else (r.stderr.decode(errors="replace").strip()[-300:] or f"exit {r.returncode}")


def available(mode: str) -> tuple[bool, str]:
    """(usable, why not) for bwrap or unshare on this machine."""
    if mode == "none":
        return True, ""
    if shutil.which(mode) is None:
        return False, f"`{mode}` is not installed"
    return _works(mode)


def choose(requested: str) -> str:
    """The isolation mode to use; `auto` picks bwrap, then unshare, and refuses if neither works."""
    if requested not in ("auto", *MODES):
        raise IsolationUnavailable(f"unknown sandbox.isolation={requested!r}; valid: auto, {', '.join(MODES)}")
    candidates = ["bwrap", "unshare"] if requested == "auto" else [requested]
    reasons = []
    for mode in candidates:
        ok, why = available(mode)
        if ok:
            return mode
        reasons.append(f"{mode}: {why}")
    raise IsolationUnavailable(
        "cannot isolate agent programs on this machine (" + "; ".join(reasons) + "). Install bubblewrap "
        "(apt-get install bubblewrap) or allow unprivileged namespaces; to run programs WITHOUT isolation "
        "(unsafe: they can read and write your files and use the network) set sandbox.isolation=none explicitly.")


def _base_env() -> dict:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1"}


def zygote_env() -> dict:
    """The whole environment of a worker: no host variable reaches the sandbox."""
    return _base_env()


def private_hides(mode: str, private_paths: tuple[str, ...]) -> list[str]:
    """Task data the host names as private (user tables, task folders with answers, the cache dir), to hide.

    bwrap mounts only the system and the Python environment, so only a private path inside those
    needs covering; unshare shows the host tree, so every one is covered."""
    mounted = [*SYSTEM_DIRS, *python_roots()]
    paths = [os.path.realpath(p) for p in private_paths if os.path.exists(p)]
    # never the environment itself or a folder holding it (a cache dir "/opt" around /opt/conda)
    paths = [p for p in paths if not any(m == p or m.startswith(p + os.sep) for m in mounted) and p != "/"]
    if mode == "bwrap":
        paths = [p for p in paths if any(p.startswith(m + os.sep) for m in mounted)]
    return sorted(set(paths))


def command(mode: str, zygote_cfg: dict, probe: bool = False, scratch_mb: int = 512,
            private_paths: tuple[str, ...] = ()) -> list[str]:
    """argv that starts the zygote (or, with probe=True, a trivial check) inside `mode`."""
    import json

    py = interpreter()
    hidden = hidden_paths() + tuple(private_hides(mode, private_paths))
    if probe and mode != "unshare":
        # as the unprivileged uid, reach the interpreter's packages (a 0700 parent would block them)
        payload = ["-I", "-c", "import os; os.setgroups([]); os.setgid(%d); os.setuid(%d); import numpy, sklearn; "
                   "print('probe-ok')" % (UID_BASE, UID_BASE)]
    elif probe:  # unshare: the same check after the zygote's own mounts, which re-expose the environment
        cover, expose = _unshare_cover(mode)
        payload = ["-I", "-B", str(ZYGOTE), json.dumps(dict(zygote_cfg, probe=True, mounts="unshare", hide=list(hidden),
                                                            cover=cover, expose=expose, scratch_mb=scratch_mb))]
    else:
        zygote = ZYGOTE_IN_SANDBOX if mode == "bwrap" else str(ZYGOTE)
        cover, expose = _unshare_cover(mode)
        payload = ["-I", "-B", zygote, json.dumps(dict(zygote_cfg, mounts="unshare" if mode == "unshare" else "none",
                                                       hide=list(hidden), cover=cover, expose=expose,
                                                       scratch_mb=scratch_mb))]
    if mode == "none":
        return [py, *payload]
    if mode == "unshare":
        return ["unshare", "--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child",
                "--mount-proc", py, *payload]
    if mode != "bwrap":
        raise ValueError(mode)
    argv = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox"]
    for k, v in _base_env().items():
        argv += ["--setenv", k, v]
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    for name in ETC_ESSENTIALS:
        if os.path.exists(f"/etc/{name}"):
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    # the scratch /tmp first: an environment that lives under /tmp (a CI venv) is bound on top of it, not hidden
    argv += ["--size", str(scratch_mb << 20), "--perms", "0755", "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
    for root in python_roots():
        argv += _mkdirs_0755(root) + ["--ro-bind", root, root]
    for path in hidden:
        if os.path.isdir(path):
            argv += ["--perms", "0755", "--tmpfs", path, "--remount-ro", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    if not probe:
        argv += ["--ro-bind", str(ZYGOTE), ZYGOTE_IN_SANDBOX]
    argv += ["--chdir", "/tmp", py, *payload]
    return argv


SCRATCH_DIRS = ("/tmp", "/var/tmp")  # replaced by private tmpfs in every mode


def _mkdirs_0755(path: str) -> list[str]:
    """bwrap creates missing parents with the host's modes (e.g. /root is 0700), which would stop
    the unprivileged child from reaching the interpreter; create them 0755 first."""
    out = []
    parts = Path(path).parts[1:-1]
    for i in range(1, len(parts) + 1):
        d = "/" + "/".join(parts[:i])
        if _under_system(d) or d in ("/etc", "/tmp", "/proc", "/dev"):
            continue
        out += ["--perms", "0755", "--dir", d]
    return out


def _unshare_cover(mode: str) -> tuple[list[str], list[str]]:
    """In unshare mode the host tree stays visible: (places that hold secrets or runs, to cover with
    an empty tmpfs; Python roots inside them, re-exposed read-only, e.g. a venv in a home directory)."""
    if mode != "unshare":
        return [], []
    from wmrl.config import TaskConfig

    repo = str(Path(wmrl.__file__).resolve().parents[1])
    roots = python_roots()
    # the home directory, and any directory the slot uid could not traverse to reach the environment
    closed = {str(a) for r in roots for a in Path(r).parents if a != Path("/") and not os.stat(a).st_mode & 0o001}
    cover = sorted(p for p in {repo, os.path.expanduser(TaskConfig.cache_dir), os.path.expanduser("~/.cache"),
                               os.path.expanduser("~"), os.getcwd(), "/home", "/work", "/mnt", "/media", "/srv",
                               "/var/lib", "/var/log", "/run/secrets", *closed} if os.path.isdir(p) and p != "/")
    # never cover the interpreter itself or part of it; re-expose the roots that lie inside a cover
    cover = [p for p in cover if not any(p == r or p.startswith(r + os.sep) for r in roots)]
    # roots inside a cover, or inside a scratch directory the zygote replaces by a tmpfs (a venv in /tmp)
    expose = [r for r in roots if any(r.startswith(p + os.sep) for p in [*cover, *SCRATCH_DIRS])]
    return cover, expose
