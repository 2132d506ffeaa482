"""Rollouts: typed trajectories (`types`), the batch they become (`batch`), and the turn loop that
plays them (`collect`: import `wmrl.rollout.collect` for `Rollout`; it sits above the environment,
which itself uses the types)."""
from wmrl.rollout.batch import RolloutBatch, make_batch
from wmrl.rollout.types import Judgement, Source, Trajectory, TrajectoryRecord, Turn, TurnItem

__all__ = ["Judgement", "RolloutBatch", "Source", "Trajectory", "TrajectoryRecord", "Turn",
           "TurnItem", "make_batch"]
