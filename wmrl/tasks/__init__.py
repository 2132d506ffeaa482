"""Research tasks an agent's program is scored on. Importing this package does not import scikit-learn."""
from wmrl.tasks.action import ACTION_CLASSES, action_class
from wmrl.tasks.spec import TaskError, TaskSpec
from wmrl.tasks.suite import TaskSuite, load_suite
from wmrl.tasks.task import Task

__all__ = ["ACTION_CLASSES", "Task", "TaskError", "TaskSpec", "TaskSuite", "action_class", "load_suite"]
