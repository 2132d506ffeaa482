"""The vLLM generator's wiring, against a fake `vllm` module (vLLM itself needs a CUDA machine):
the engine is asked for processed (temperature-applied) log-probs, weights are pushed into the
engine through WeightSync, and completions carry the sampled tokens' log-probs."""
import sys
import types
from types import SimpleNamespace

import torch

from wmrl.generation import WeightSync


class FakeLLM:
    instances = []

    def __init__(self, model, **kwargs):
        self.kwargs, self.loaded = kwargs, []
        FakeLLM.instances.append(self)

    def collective_rpc(self, fn):
        worker = SimpleNamespace(model_runner=SimpleNamespace(model=SimpleNamespace(
            load_weights=lambda weights: self.loaded.append(dict(weights)))))
        return [fn(worker)]

    def generate(self, prompts, params, use_tqdm=False):
        self.params = params
        out = []
        for p in prompts:
            ids = [7, 8, 2]
            lps = [{t: SimpleNamespace(logprob=-0.1 * (k + 1))} for k, t in enumerate(ids)]
            out.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, logprobs=lps)]))
        return out


class Saves(torch.nn.Linear):
    def save_pretrained(self, path):
        pass


def test_vllm_generator_wiring_with_a_fake_engine(monkeypatch):
    fake = types.ModuleType("vllm")
    fake.LLM = FakeLLM
    fake.SamplingParams = lambda **kw: SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    from wmrl.generation.vllm import VLLMGenerator

    policy = Saves(2, 1)
    gen = VLLMGenerator(policy, SimpleNamespace(save_pretrained=lambda path: None), eos_ids=[2])
    engine = FakeLLM.instances[-1]
    assert engine.kwargs["logprobs_mode"] == "processed_logprobs"  # the sampling distribution's log-probs
    sync = WeightSync(gen, policy)
    sync(0)
    with torch.no_grad():
        policy.weight.add_(1.0)  # an optimizer update
    sync(1)
    assert len(engine.loaded) == 2 and torch.equal(engine.loaded[-1]["weight"], policy.weight)
    out = gen.generate([[1, 2, 3]], temperature=0.7, top_p=1.0, max_new_tokens=8, seed=3)
    assert engine.params.temperature == 0.7 and engine.params.seed == 3 and engine.params.stop_token_ids == [2]
    assert out[0].token_ids == [7, 8, 2] and out[0].logprobs == [-0.1, -0.2, -0.30000000000000004] and out[0].finished
