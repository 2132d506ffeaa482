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


# A line of prose, not code: a capitalised word then another word ("Here is", "This uses", "I chose"),
# or a markdown bullet. Python statements do not start so (a class name is followed by "(" or ".").
_PROSE = re.compile(r"^(?:[A-Z][A-Za-z']*[,:!.]?[ \t]+[A-Za-z(\"']|[-*][ \t]|\d+[.)][ \t])")


def extract_program(completion: str) -> str:
    """The program in a completion, as instruct models write it: the first fenced ```python block that
    defines `build` (else the first ```python block, else the first plain fence); without a fence, the
    text less the prose lines before and after the code; else the whole text."""
    for fence in (_PY_FENCE, _ANY_FENCE):
        blocks = [m.group(1) for m in fence.finditer(completion)]
        if blocks:
            block = next((b for b in blocks if _BUILD_DEF.search(b)), blocks[0])
            return block.strip("\n") + "\n"
    lines = completion.split("\n")
    start, end = 0, len(lines)
    while start < end and (not lines[start].strip() or _PROSE.match(lines[start])):
        start += 1
    while end > start and (not lines[end - 1].strip() or _PROSE.match(lines[end - 1])):
        end -= 1
    prose = [line for line in lines[:start] + lines[end:] if line.strip()]
    if prose and start < end:
        return "\n".join(lines[start:end]) + "\n"
    return completion


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
