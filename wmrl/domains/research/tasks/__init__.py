"""Research tasks an agent's program is scored on. Importing this package does not import scikit-learn."""
from wmrl.domains.research.tasks.action import ACTION_CLASSES, action_class
from wmrl.domains.research.tasks.spec import TaskError, TaskSpec
from wmrl.domains.research.tasks.suite import TaskSuite, load_suite
from wmrl.domains.research.tasks.task import Task

__all__ = ["ACTION_CLASSES", "Task", "TaskError", "TaskSpec", "TaskSuite", "action_class", "load_suite"]
