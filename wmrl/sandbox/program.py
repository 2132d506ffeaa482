"""Reading an agent's program out of a completion, and the deterministic host-side pre-check.

The pre-check runs before any sandbox is involved (and is reused by the world model), so
malformed and syntactically broken programs never cost a sandbox slot.
"""
from __future__ import annotations

import ast
import warnings
import re

from wmrl.outcome import Status

# An unterminated fence (completion cut at max_new_tokens) still yields its program.
_PY_FENCE = re.compile(r"```(?:python|py)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_ANY_FENCE = re.compile(r"```[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_BUILD_DEF = re.compile(r"^\s*(?:async\s+)?def\s+build\b", re.MULTILINE)


def extract_program(completion: str) -> str:
    """The program in a completion: the first ```python fenced block if any, else the whole text."""
    match = _PY_FENCE.search(completion) or _ANY_FENCE.search(completion)
    return match.group(1).strip("\n") + "\n" if match else completion


_SCRIPT_MARK = re.compile(r"submission")


def interface_of(descriptor: str) -> str:
    """The interface a task descriptor names (`interface=script`), estimator by default."""
    return "script" if "interface=script" in descriptor.split() else "estimator"


def precheck(source: str, interface: str = "estimator") -> tuple[Status | None, str]:
    """(status, detail) when the program cannot run at all, else (None, "").

    Estimator tasks: empty text or no `def build` is malformed; a program with a `def build` that
    Python cannot parse is a syntax error; one whose `build` is not at top level is malformed.
    Script tasks: empty text, or text that never names the submission it must write, is malformed;
    otherwise unparsable text is a syntax error. Decided by parsing alone, so it is deterministic
    and costs microseconds.
    """
    if not source or not source.strip():
        return Status.MALFORMED, "empty program"
    if interface == "script":
        if not _SCRIPT_MARK.search(source):  # prose, or a program that cannot write ./submission/submission.csv
            return Status.MALFORMED, "the program never writes ./submission/submission.csv"
        return _parses(source)
    if not _BUILD_DEF.search(source):  # prose without a program is malformed, not a syntax error
        return Status.MALFORMED, "no `def build()` in the program"
    status, detail = _parses(source)
    if status is not None:
        return status, detail
    tree = ast.parse(source)
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "build" for n in tree.body):
        return Status.MALFORMED, "no top-level `def build()`"
    return None, ""


def _parses(source: str) -> tuple[Status | None, str]:
    try:
        with warnings.catch_warnings():  # agent code: its SyntaxWarnings are not ours
            warnings.simplefilter("ignore", SyntaxWarning)
            ast.parse(source)
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes in the source
        line = getattr(e, "lineno", None)
        return Status.SYNTAX_ERROR, f"{type(e).__name__}: {getattr(e, 'msg', e)}" + (f" (line {line})" if line else "")
    return None, ""
