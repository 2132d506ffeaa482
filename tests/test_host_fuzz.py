"""Agent text on the host: every path that reads it before (or instead of) the sandbox returns a status within
a time and memory bound, prints nothing, never raises or exits, and imports or runs no module an agent names."""
from __future__ import annotations

import gc
import random
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_programs  # noqa: E402

from wmrl.domains.research.outcome import Outcome, Status, render_observation  # noqa: E402
from wmrl.domains.research.sandbox.program import MAX_NESTING, MAX_PROGRAM_CHARS, extract_program, parse_program, precheck  # noqa: E402
from wmrl.domains.research.tasks.action import action_class  # noqa: E402
from wmrl.domains.research.world_model.static import decided_status  # noqa: E402

N_PROGRAMS = 10_000
DECISION_S = 0.050  # per text, CPU time of this thread: every host-side reading of one text together
PEAK_BYTES = 64 << 20  # Python allocations while reading one text (the text itself not counted)
MEMORY_EVERY = 10


def _read(completion: str) -> list:
    """What the trainer does with one completion before any sandbox: extract, pre-check, static checks (both
    interfaces), the action class of the strata, and the observation the agent would read."""
    program = extract_program(completion)
    out = []
    for interface in ("estimator", "script"):
        status, detail = precheck(program, interface)
        assert status is None or isinstance(status, Status)
        decided, why = decided_status(program, interface)
        assert decided is None or isinstance(decided, Status)
        if status is not None:
            assert decided is status  # the world model decides what the pre-check decides, the same way
        out.append(render_observation(Outcome(task="t", status=decided or Status.VALID, stderr_tail=why), turn=1))
    out.append(action_class(program))
    return out


def test_ten_thousand_hostile_programs_are_read_within_bounds_silently_and_import_nothing(capfd):
    rng = random.Random(0)
    _read(fuzz_programs._estimator(rng))  # warm: the catalog and our own modules load once
    modules_before = set(sys.modules)
    slowest, peak, n = (0.0, ""), 0, 0
    for k, text in enumerate(fuzz_programs.programs(N_PROGRAMS, seed=0)):
        completion = fuzz_programs.completion(random.Random(k), text)
        parse_program.cache_clear()
        if k % 500 == 0:  # a full collection of the test process's heap, which any allocation may trigger, is not the reading's
            gc.collect()
        gc.disable()
        start = time.thread_time()
        try:
            _read(completion)
        except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included: none may escape
            raise AssertionError(f"text {k} raised {type(e).__name__}: {e!r}\n{completion[:500]!r}") from None
        finally:
            spent = time.thread_time() - start
            gc.enable()
        slowest = max(slowest, (spent, completion[:300]))
        if k % MEMORY_EVERY == 0:  # tracemalloc slows parsing twofold: memory is measured apart from time
            parse_program.cache_clear()
            tracemalloc.start()
            try:
                _read(completion)
                peak = max(peak, tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
        n += 1
    assert n == N_PROGRAMS
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert set(sys.modules) - modules_before == set()  # nothing an agent named was imported
    assert slowest[0] <= DECISION_S, f"{slowest[0] * 1e3:.1f} ms for {slowest[1]!r}"
    assert peak <= PEAK_BYTES, f"{peak >> 20} MiB"


def test_text_beyond_the_parse_bounds_is_one_recorded_failure_everywhere():
    deep = "def build():\n    return " + "1 + " * 3500 + "1\n"  # a RecursionError in ast.parse (at the sandbox's compile too)
    nested = "def build():\n    return " + "[" * (MAX_NESTING + 5) + "]" * (MAX_NESTING + 5) + "\n"  # parses, too deep
    long = "def build():\n    return 1\n" + "#" * MAX_PROGRAM_CHARS
    for program, status in ((deep, Status.SYNTAX_ERROR), (nested, Status.SYNTAX_ERROR), (long, Status.MALFORMED)):
        assert precheck(program)[0] is status and decided_status(program)[0] is status
        assert action_class(program) == "unparsable"
    assert precheck("def build():\n    return " + "[" * 60 + "]" * 60 + "\n") == (None, "")


def test_repeated_and_unpacked_keywords_of_every_estimator_never_raise_and_are_never_decided_valid():
    """`RandomForestClassifier(max_depth=None, max_depth=5)` parses (the compiler rejects it: the sandbox reports
    runtime_error, "SyntaxError in build: keyword argument repeated") and made the literal check sort None against
    an int: a TypeError in the trainer, which crashed a DDP rank mid-step. Whatever the values, keywords repeated
    or unpacked with `**` are now left to the network or decided the failure the sandbox reports."""
    from wmrl.domains.research import grammar

    values = ["None", "5", "0.5", "'a'", "True", "(1, 2)", "-1"]
    rng = random.Random(0)
    for module, classifier, regressor, _ in grammar.FAMILIES.values():
        for name, param in ((n, p) for n in (classifier, regressor) for p in ("max_depth", "C", "n_estimators", "alpha", "random_state", "n_neighbors", "fit_intercept")):
            a, b = rng.sample(values, 2)
            for call in (f"{name}({param}={a}, {param}={b})", f"{name}({param}={b}, {param}={a})",
                         f"{name}(**{{'{param}': {a}}})", f"{name}({param}={a}, **{{'x': {b}}})"):
                program = f"from {module} import {name}\n\ndef build():\n    return {call}\n"
                piped = f"from sklearn.pipeline import make_pipeline\n{program}".replace(f"return {call}",
                                                                                          f"return make_pipeline({call})")
                for text in (program, piped):
                    assert decided_status(text)[0] in (None, Status.RUNTIME_ERROR), text


def test_command_line_entry_points_named_by_a_program_never_run_on_the_host(tmp_path, monkeypatch):
    """`from numpy.f2py.__main__ import main` imported in the trainer ran f2py with the trainer's argv (it read
    the files named there and raised SystemExit); a module of our own proves no code of a named module runs."""
    canary = tmp_path / "sklearn_canary"
    canary.mkdir()
    (canary / "__init__.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\n")
    (canary / "__main__.py").write_text("raise SystemExit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["train.py", str(tmp_path / "secret.txt")])
    for program in ["from numpy.f2py.__main__ import main\n\ndef build():\n    return main()\n",
                    "from sklearn.__main__ import x\n\ndef build():\n    return x\n",
                    "from sklearn_canary.__main__ import x\nfrom sklearn_canary import y\n\ndef build():\n    return x\n",
                    "from scipy.__main__ import x\nfrom numpy.__main__ import y\n\ndef build():\n    return x\n"]:
        before = set(sys.modules)
        decided_status(program)
        assert set(sys.modules) - before == set()
    assert not (tmp_path / "ran").exists()


def test_the_catalog_is_built_in_a_child_process_and_matches_the_libraries(tmp_path, monkeypatch):
    """Built where no cache exists (here a fresh one), by a child: the trainer's own modules are untouched, and
    what it records is what the libraries hold."""
    import sklearn.svm

    from wmrl.domains.research.world_model import catalog as catalog_module

    monkeypatch.setenv("WMRL_CACHE", str(tmp_path))
    catalog_module.catalog.cache_clear()
    try:
        before = set(sys.modules)
        data = catalog_module.catalog()
        assert set(sys.modules) - before == set()
        assert catalog_module.cache_path().is_file() and catalog_module.cache_path().is_relative_to(tmp_path)
    finally:
        catalog_module.catalog.cache_clear()
    svc = data["estimators"]["sklearn.svm:SVC"]
    assert sorted(p[0] for p in svc["params"][1:]) == list(sklearn.svm.SVC().get_params())
    assert "C" in svc["constraints"] and data["modules"]["sklearn.svm"]["package"]
    assert "numpy.f2py.__main__" in data["modules"] and "names" not in data["modules"]["numpy.f2py.__main__"]
