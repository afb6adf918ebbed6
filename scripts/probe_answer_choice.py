"""Does a model read the passages? Score its choice among the listed answers after gold retrieval.

For every held-out question of a Search-v0 world, the expert's searches are played (so the
passages holding the answer are in the observation), then each listed ``answer[...]`` action is
scored by the model's log-probability of the response ``<action>answer[X]</action>`` under the
trainer's prompt (chat template, instruction, observation, admissible actions). Reports, per
question kind, how often the most likely answer is right against the chance of a uniform pick
among the listed answers. Used in docs/benchmarks.md ("SmolLM2-135M on Search-v0") to explain why
a policy prefers a shortcut to reading.

    python scripts/probe_answer_choice.py --model smollm2-135m --names words
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl import envs
from agentrl.models import resolve_model_path
from agentrl.rollout.prompt import PromptBuilder, PromptConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--names", default="words")
    ap.add_argument("--kinds", default="1-hop,2-hop,comparison")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = resolve_model_path(args.model, None)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    kinds = args.kinds.split(",")
    env = envs.make("Search-v0", names=args.names, question_types=kinds, max_turns=8)
    base = env.unwrapped
    prompts = PromptBuilder(tok, PromptConfig(history=0))
    right: dict[str, list[float]] = defaultdict(list)
    chance: dict[str, list[float]] = defaultdict(list)
    for tid in base.task_ids("test"):
        obs, info = env.reset(options={"task_id": tid})
        while (act := base.expert_action()).startswith("search["):
            obs, _r, _t, _tr, info = env.step(act)
        answers = [a for a in info["admissible_actions"] if a.startswith("answer[")]
        msgs = prompts.messages(info["instruction"], [], obs, info["admissible_actions"])
        prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        scores = []
        for a in answers:
            r_ids = tok(f"<action>{a}</action>", add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                logits = model(torch.tensor([p_ids + r_ids])).logits[0, len(p_ids) - 1 : -1]
            logp = logits.log_softmax(-1).gather(1, torch.tensor(r_ids)[:, None])
            scores.append(float(logp.sum()))
        best = answers[max(range(len(answers)), key=scores.__getitem__)]
        kind = tid.split("/")[0]
        right[kind].append(float(best == act))
        chance[kind].append(1.0 / len(answers))
    print("| kind | questions | model's most likely answer right | uniform pick among the listed |")
    print("|---|---|---|---|")
    for kind in kinds:
        n = len(right[kind])
        print(
            f"| {kind} | {n} | {100 * sum(right[kind]) / n:.1f} % | {100 * sum(chance[kind]) / n:.1f} % |"
        )


if __name__ == "__main__":
    main()
