"""World models: predict the outcome of executing a program, learn from real executions."""
from wmrl.domains.research.sandbox.program import precheck
from wmrl.domains.research.world_model.base import WMPrediction, WMQuery, WorldModel, reward_moments
from wmrl.domains.research.world_model.ensemble import LearnedEnsembleWM
from wmrl.domains.research.world_model.factory import load_world_model, make_world_model
from wmrl.domains.research.world_model.fidelity import fidelity_metrics, reward_fidelity
from wmrl.domains.research.world_model.prompted import PromptedLMWM

__all__ = ["WMPrediction", "WMQuery", "WorldModel", "LearnedEnsembleWM", "PromptedLMWM", "make_world_model", "load_world_model",
           "fidelity_metrics", "reward_fidelity", "precheck", "reward_moments"]
