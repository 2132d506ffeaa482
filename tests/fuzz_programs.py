"""Hostile and mutated agent text for the host-side fuzz test: what a policy (or an attacker steering one)
may hand the trainer in place of a program. Deterministic for a seed."""
from __future__ import annotations

import pkgutil
import random
import sys

from wmrl.domains.research import grammar

NESTINGS = [  # (opening, closing) pieces repeated n times around an atom
    ("(", ")"), ("[", "]"), ("{", "}"), ("-", ""), ("not ", ""), ("lambda: ", ""), ("f(", ")"), ("[x for x in ", "]"),
    ("a if b else ", ""), ("await ", ""), ("*", ""), ("~", ""), ("1 + ", ""), ("x.", ""), ("(1, ", ")"),
]
ATOMS = ["1", "x", "'s'", "None", "RandomForestClassifier()", "()", "f()"]
ODD_TEXT = ["\x00", "\ufeff", "\ud800", "\udcff", "\u202e", "\r", "\r\n", "\t", "\x0c", "\x1b[2J", "\\", "'''", '"""',
            "# -*- coding: latin-1 -*-\n", "\u00e9", "\U0001f600", "\u0660", "ﬁ", "\x85", "\u2028"]


def top_level_modules() -> list[str]:
    """Every importable top-level name on this interpreter's path, whatever it is (its code never runs here)."""
    names = {m.name for m in pkgutil.iter_modules()} | set(sys.builtin_module_names)
    return sorted(n for n in names if n.isidentifier())


def _estimator(rng: random.Random) -> str:
    fam = rng.choice(list(grammar.FAMILIES.values()))
    return f"from {fam[0]} import {fam[1]}\n\ndef build():\n    return {fam[1]}()\n"


def nested(rng: random.Random) -> str:
    open_, close = rng.choice(NESTINGS)
    n = rng.choice([50, 99, 101, 150, 200, 500, 1000, 3000, 10000])
    expr = open_ * n + rng.choice(ATOMS) + close * n
    return rng.choice([f"def build():\n    return {expr}\n", f"x = {expr}\ndef build():\n    return x\n",
                       f"from sklearn.svm import SVC\n\ndef build():\n    return SVC(C={expr})\n"])


def deep_blocks(rng: random.Random) -> str:
    n = rng.choice([20, 60, 99, 120])
    kw = rng.choice(["if x:", "for i in y:", "while 1:", "with a:", "try:", "def g():", "class C:"])
    body = "".join(" " * (4 * (i + 1)) + kw + "\n" for i in range(n)) + " " * (4 * (n + 1)) + "pass\n"
    return "def build():\n" + body + "    return 1\n"


def huge(rng: random.Random) -> str:
    n = rng.choice([1_000, 30_000, 33_000, 200_000, 2_000_000])
    return rng.choice([
        f"def build():\n    return '{'a' * n}'\n",
        f"def build():\n    return {'9' * min(n, 100_000)}\n",
        f"def build():\n    x = [{', '.join(['1'] * (n // 3))}]\n    return x\n",
        "def build():\n" + "    x = 1\n" * (n // 10) + "    return x\n",
        "# " + "#" * n + "\ndef build():\n    return 1\n",
        f"def build():\n    return {'+'.join(['1'] * (n // 2))}\n",
        "def build():\n    return b'" + "\\x00" * (n // 4) + "'\n",
    ])


def odd(rng: random.Random, base: str) -> str:
    pos = rng.randrange(len(base) + 1)
    return base[:pos] + "".join(rng.choice(ODD_TEXT) for _ in range(rng.randint(1, 4))) + base[pos:]


def imports(rng: random.Random, modules: list[str]) -> str:
    mod = rng.choice(modules + ["sklearn", "numpy", "scipy"] * 20)
    sub = rng.choice(["", ".__main__", ".__init__", ".tests", ".conftest", ".setup", "._private", ".x.y.z", ".f2py.__main__",
                      ".__check_build", ".experimental.enable_iterative_imputer", ".utils._testing", ".testing"])
    name = rng.choice(["main", "*", "X", "run", "setup", "__version__", "SVC", "RandomForestClassifier", "test", "os"])
    form = rng.choice([f"from {mod}{sub} import {name}", f"import {mod}{sub}", f"from {mod}{sub} import {name} as build",
                       f"from . import {name}", f"from .{mod} import {name}", f"__import__('{mod}{sub}')",
                       f"import {mod}{sub} as m\nfrom {mod}{sub} import {name}"])
    if name == "*" and "import *" in form and "as" in form:
        form = f"from {mod}{sub} import *"
    return form + "\n\ndef build():\n    return " + rng.choice(["X()", "SVC()", "main()", "m", "1"]) + "\n"


def mutated(rng: random.Random, base: str) -> str:
    s = base
    for _ in range(rng.randint(1, 6)):
        op, i, j = rng.randrange(6), rng.randrange(len(s) + 1), rng.randrange(len(s) + 1)
        i, j = min(i, j), max(i, j)
        if op == 0:
            s = s[:i] + s[j:]
        elif op == 1:
            s = s[:i] + s[i:j] * rng.randint(2, 20) + s[j:]
        elif op == 2:
            s = s[:i] + chr(rng.choice([rng.randrange(32, 127), rng.randrange(0, 0x3000)])) + s[i:]
        elif op == 3:
            s = s[:i] + rng.choice(["(", ")", ":", "\n    ", "def build():\n", "return ", "**", "=", ",", "'"]) + s[i:]
        elif op == 4:
            s = s[j:] + s[:i]
        else:
            s = s.replace(" ", rng.choice(["\t", "  ", ""]), rng.randint(1, 5))
        s = s[:200_000]
    return s


def completion(rng: random.Random, program: str) -> str:
    """The program as a completion around it: fences (closed or not), prose, nothing."""
    return rng.choice([program, f"```python\n{program}\n```", f"Here is my program:\n```python\n{program}",
                       f"```\n{program}\n```\nThis should work.", "```python\n" * rng.randint(1, 50) + program,
                       "Here is the plan.\n" + program + "\nI chose this model.", program + "```" * rng.randint(1, 30)])


def programs(n: int, seed: int = 0):
    """`n` texts, one at a time (a few are megabytes long)."""
    rng = random.Random(seed)
    modules = top_level_modules()
    bases = [grammar.sample_program(k, rng, broken_rate=0.5, table=t).source
             for k in ("classification", "regression") for t in (False, True) for _ in range(10)]
    bases += [_estimator(rng) for _ in range(10)]
    fixed = [f"from {m} import main\nfrom {m}.__main__ import main\nimport {m}.__main__\n\ndef build():\n    return main()\n"
           for m in modules]  # every installed top-level package, and its command-line entry point
    makers = [lambda: nested(rng), lambda: deep_blocks(rng), lambda: huge(rng), lambda: odd(rng, rng.choice(bases)),
              lambda: imports(rng, modules), lambda: mutated(rng, rng.choice(bases)), lambda: rng.choice(bases)]
    weights = [2, 1, 1, 2, 4, 6, 1]
    yield from fixed[:n]
    for _ in range(n - len(fixed)):
        yield rng.choices(makers, weights)[0]()
