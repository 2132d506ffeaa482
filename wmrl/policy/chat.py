"""Turns of a multi-turn trajectory as token ids, through the tokenizer's own chat template.

The same code serves the built-in tokenizer (whose template is defined here) and a real
checkpoint's template: observation tokens are the difference between the rendering of the
conversation with and without the new user turn, so ids are appended, never re-tokenized.
"""
from __future__ import annotations

# Template of the built-in tokenizer: every user turn ends by opening the assistant turn.
BUILTIN_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}{{ m['content'] }}<|end|>\n"
    "{% else %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n<|assistant|>\n{% endif %}"
    "{% endfor %}"
)
SYSTEM = "Answer the task."  # a domain names its own (`Domain.system`)
NEXT_TURN = "Improve the program if you can. Answer with one Python program."


class ChatFormat:
    def __init__(self, tokenizer, system: str = SYSTEM):
        self.tok = tokenizer
        self.system = system  # the system turn of a checkpoint's template (the built-in one has none)
        self.builtin = tokenizer.chat_template == BUILTIN_TEMPLATE
        # a stand-in conversation whose rendering precedes every observation: rendered once
        base = self._messages("P") + [{"role": "assistant", "content": "A"}]
        self._base = (base, self._render(base, gen=False))

    def _render(self, messages: list[dict], gen: bool) -> str:
        if self.builtin:
            return self.tok.apply_chat_template(messages, tokenize=False)
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)

    def _messages(self, prompt: str) -> list[dict]:
        if self.builtin:
            return [{"role": "user", "content": prompt}]
        return [{"role": "system", "content": self.system}, {"role": "user", "content": prompt}]

    def prompt_ids(self, prompt: str) -> list[int]:
        return self.tok(self._render(self._messages(prompt), gen=True), add_special_tokens=False)["input_ids"]

    def observation_ids(self, observation: str) -> list[int]:
        """Tokens that close the assistant turn's aftermath and open the next assistant turn."""
        base, before = self._base
        after = self._render(base + [{"role": "user", "content": observation}], gen=True)
        if not after.startswith(before):
            raise ValueError("chat template re-renders earlier turns; multi-turn ids cannot be appended")
        delta = after[len(before):]
        return self.tok(delta, add_special_tokens=False)["input_ids"]

    def observation_text(self, feedback: str) -> str:
        return f"{feedback}\n{NEXT_TURN}"

    @property
    def eos_ids(self) -> list[int]:
        ids = {self.tok.eos_token_id}
        for t in ("<|end|>", "<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
            i = self.tok.convert_tokens_to_ids(t)
            if isinstance(i, int) and i != self.tok.unk_token_id and i is not None and i >= 0:
                ids.add(i)
        return sorted(i for i in ids if i is not None)
