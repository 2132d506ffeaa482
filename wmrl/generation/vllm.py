"""vLLM generation (optional extra, GPU only): the policy is served by a vLLM engine in the
trainer's process and its weights are pushed into the engine after every optimizer update.

vLLM pins a CUDA torch, so the CPU test suite checks this wiring against a fake engine
(tests/test_vllm_wiring.py); imported only when `generation.backend=vllm` is asked for.
"""
from __future__ import annotations

import tempfile

from wmrl.generation.base import Completion


class VLLMGenerator:
    def __init__(self, model, tokenizer, eos_ids: list[int], gpu_memory_utilization: float = 0.3):
        try:
            import vllm
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise ImportError("generation.backend=vllm needs the optional extra on a GPU machine: "
                              "pip install 'wmrl[vllm]'") from e
        self._vllm = vllm
        self.eos_ids = eos_ids
        self._dir = tempfile.mkdtemp(prefix="wmrl-vllm-")
        model.save_pretrained(self._dir)
        tokenizer.save_pretrained(self._dir)
        # log-probs of the distribution tokens were sampled from (after temperature), not of the raw logits
        # (vLLM's default): the trainer's importance ratio is then exactly 1 at the first update
        self.llm = vllm.LLM(model=self._dir, gpu_memory_utilization=gpu_memory_utilization,
                            enable_prefix_caching=True, dtype="auto", logprobs_mode="processed_logprobs")

    def sync_weights(self, model) -> None:
        weights = ((name, p.detach()) for name, p in model.state_dict().items())
        self.llm.collective_rpc(lambda worker: worker.model_runner.model.load_weights(weights=weights))

    def generate(self, prompts, *, temperature, top_p, max_new_tokens, seed) -> list[Completion]:
        params = self._vllm.SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_new_tokens,
                                           stop_token_ids=self.eos_ids, logprobs=0, seed=seed)
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        result = []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [lp[t].logprob for t, lp in zip(ids, c.logprobs)]
            result.append(Completion(ids, lps, bool(ids) and ids[-1] in self.eos_ids))
        return result
