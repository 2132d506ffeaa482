"""Reading an agent's program out of a completion, and the deterministic host-side pre-check.

The pre-check runs before any sandbox is involved (and is reused by the world model), so
malformed and syntactically broken programs never cost a sandbox slot.
"""
from __future__ import annotations

import ast
import gc
import re
import warnings
from contextlib import contextmanager
from functools import lru_cache

from wmrl.domains.research.outcome import Status

# Bounds on what the host parses (agent text, never executed here): beyond them a program is a recorded
# failure, decided the same way by the pre-check, the world model and the sandbox (which all call `precheck`).
MAX_PROGRAM_CHARS = 16_384  # a few ms to parse; a completion of a few thousand tokens is below it
MAX_COMPLETION_CHARS = 4 * MAX_PROGRAM_CHARS  # a completion searched for its program: prose and fences around it
MAX_NESTING = 100  # syntax-tree depth; CPython itself refuses 200 nested brackets and 100 indentation levels


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
    text less the prose lines before and after the code; else the whole text. A completion longer than
    MAX_COMPLETION_CHARS is returned whole (the pre-check then refuses it), unsearched."""
    if len(completion) > MAX_COMPLETION_CHARS:
        return completion
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


@contextmanager
def collector_paused():
    """No cyclic garbage collection while a syntax tree is built and walked: its nodes hold no cycles, and a
    full collection of the trainer's heap, triggered by their allocations, would cost more than the parse."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@lru_cache(maxsize=4)  # the pre-check, the static checks and the action class read the same program in turn
def parse_program(source: str) -> tuple[ast.Module | None, Status | None, str]:
    """(tree, None, "") of a program the host may inspect, else (None, status, why): parsing is bounded in
    size and nesting, so no text makes it (or a recursive walk of its tree) recurse, allocate or take long.
    The tree is shared between callers: read it, never change it."""
    if len(source) > MAX_PROGRAM_CHARS:
        return None, Status.MALFORMED, f"program longer than {MAX_PROGRAM_CHARS} characters ({len(source)})"
    try:
        with warnings.catch_warnings(), collector_paused():  # agent code: its SyntaxWarnings are not ours
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except UnicodeEncodeError:  # lone surrogates: bytes that were not UTF-8 (`python` itself refuses such a file)
        return None, Status.SYNTAX_ERROR, "SyntaxError: the program is not valid UTF-8 text"
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes
        line = getattr(e, "lineno", None)
        return None, Status.SYNTAX_ERROR, f"{type(e).__name__}: {getattr(e, 'msg', e)}" + (f" (line {line})" if line else "")
    except (RecursionError, MemoryError) as e:  # CPython's own parser gives up: the program cannot be compiled either
        return None, Status.SYNTAX_ERROR, f"SyntaxError: program nested too deeply to compile ({type(e).__name__})"
    with collector_paused():
        too_deep = _depth(tree) > MAX_NESTING
    if too_deep:
        return None, Status.SYNTAX_ERROR, f"SyntaxError: program nested deeper than {MAX_NESTING} levels"
    return tree, None, ""


def _depth(tree: ast.AST) -> int:
    """The syntax tree's depth, walked without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


def precheck(source: str, interface: str = "estimator") -> tuple[Status | None, str]:
    """(status, detail) when the program cannot run at all, else (None, "").

    Estimator tasks: empty text or no `def build` is malformed; a program with a `def build` that
    Python cannot parse is a syntax error; one whose `build` is not at top level is malformed.
    Script tasks: empty text, or text that never names the submission it must write, is malformed;
    otherwise unparsable text is a syntax error. Text beyond `parse_program`'s bounds fails as it says.
    Decided by parsing alone, so it is deterministic and costs at most milliseconds.
    """
    if not isinstance(source, str) or not source.strip():
        return Status.MALFORMED, "empty program"
    if len(source) > MAX_PROGRAM_CHARS:
        return parse_program(source)[1:]
    if interface == "script":
        if not _SCRIPT_MARK.search(source):  # prose, or a program that cannot write ./submission/submission.csv
            return Status.MALFORMED, "the program never writes ./submission/submission.csv"
        return parse_program(source)[1:]
    if not _BUILD_DEF.search(source):  # prose without a program is malformed, not a syntax error
        return Status.MALFORMED, "no `def build()` in the program"
    tree, status, detail = parse_program(source)
    if status is not None:
        return status, detail
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "build" for n in tree.body):
        return Status.MALFORMED, "no top-level `def build()`"
    return None, ""
