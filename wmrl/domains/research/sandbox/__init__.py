"""Safe, fast execution of agent programs: isolated warm workers, judged outcomes, a durable log."""
from wmrl.domains.research.sandbox.base import ExecRequest, Sandbox, make_sandbox
from wmrl.domains.research.sandbox.isolation import IsolationUnavailable
from wmrl.domains.research.sandbox.log import ExecutionLog, iter_log, read_log, rewind
from wmrl.domains.research.sandbox.program import extract_program, precheck

__all__ = ["ExecRequest", "Sandbox", "make_sandbox", "IsolationUnavailable", "ExecutionLog", "iter_log", "read_log", "rewind",
           "extract_program", "precheck"]
