"""Rollouts: typed trajectories, the turn loop that plays them, and the batch they become."""
from wmrl.rollout.batch import SOURCE_REAL, SOURCE_WM, RolloutBatch, make_batch
from wmrl.rollout.collect import BackgroundAnchors, Rollout, Sampling
from wmrl.rollout.types import Judgement, Trajectory, TrajectoryRecord, Turn, TurnItem

__all__ = ["SOURCE_REAL", "SOURCE_WM", "BackgroundAnchors", "Judgement", "Rollout", "RolloutBatch", "Sampling",
           "Trajectory", "TrajectoryRecord", "Turn", "TurnItem", "make_batch"]
