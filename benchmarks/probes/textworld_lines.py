"""Probe: how long are the experience model's answers on text worlds, with a room a line per sentence or per paragraph?

    python benchmarks/probes/textworld_lines.py [--seeds 0-19] [--max-steps 8]

Plays each seed game of ``COOKING_FAMILY`` twice through ``TextWorldEnv``, once
with the room's description a line per sentence (the default) and once a line
per paragraph (``&lines=paragraph``): the game's walkthrough, and a random
policy over the admissible commands (seeded by the game's seed, at most
``--max-steps`` steps). Every transition's SFT answer (the default template's
diff, reward and end: ``answer_text``) is tokenized with one tokenizer of the
scratch model's vocabulary size, split on whitespace (as ``textworld_sim.py``
trains), trained on every answer and page of both settings, and the answers'
and pages' token counts
are printed per setting as JSON lines, with the share of answers longer than
the experience model's answer budget (``ExperienceModelConfig.sampling``'s
``max_new_tokens``), which it cannot finish; and the tokens each later turn
adds to the tiny index policy's sequence (the page with its choices, and the
last reply), against ``TURN_TOKENS``, the bound ``policy_context`` sizes the
policy's context with. A one-off probe: no results file.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
from typing import Any

import anyio

SETTINGS = ("sentence", "paragraph")


async def _episodes(seeds: list[int], lines: str, max_steps: int) -> tuple[Any, list[list[tuple[Any, float, bool]]]]:
    """The task, and per episode its steps (each with its reward and whether it ended the episode): the
    walkthrough's, then a random policy's."""
    from dreamgym.core import Step, parse_state
    from dreamgym.core.state import flatten
    from dreamgym.textworlds import (
        COOKING_FAMILY,
        TextWorldEnv,
        game_for,
        parse_text_world_tasks,
        walkthrough_action,
    )

    spec = COOKING_FAMILY + ("&lines=paragraph" if lines == "paragraph" else "")
    task = parse_text_world_tasks(spec, max_steps=max_steps)[0][0]
    env = TextWorldEnv()
    episodes = []
    try:
        for seed in seeds:
            walkthrough = game_for(task, seed).walkthrough
            rng = random.Random(seed)
            for policy in ("walkthrough", "random"):
                observation = await env.reset(task, seed=seed)
                transitions = []
                for index in range(len(walkthrough) if policy == "walkthrough" else max_steps):
                    if policy == "walkthrough":
                        action = walkthrough_action(observation, walkthrough[index])
                    else:
                        buttons = [f.element for f in flatten(parse_state(observation.state))
                                   if f.element.role == "button"]  # fmt: skip
                        action = walkthrough_action(observation, rng.choice(buttons).name)
                    result = await env.step(action)
                    ended = result.terminated or result.truncated
                    step = Step(source="real", task_id=task.task_id, episode_id=f"{policy}-{seed}",
                                step_index=index, observation=observation, action=action,
                                next_observation=result.observation)  # fmt: skip
                    transitions.append((step, result.reward, ended))
                    observation = result.observation
                    if ended:
                        break
                episodes.append(transitions)
    finally:
        await env.aclose()
    return task, episodes


def _policy_turns(played: dict[str, tuple[Any, list[list[tuple[Any, float, bool]]]]]) -> dict[str, list[int]]:
    """Per setting, the tokens each later turn adds to the index policy's sequence (the new page with its
    choices, and the last reply), in the tiny index policy's tokenizer trained on both settings' pages."""
    from dreamgym.agents import LocalPolicy, LocalPolicyConfig
    from dreamgym.trainer import TINY_POLICY, tiny_index_policy

    pages = [(task, step.observation) for task, episodes in played.values() for e in episodes for step, _, _ in e]
    model, tokenizer = tiny_index_policy(pages, TINY_POLICY)
    policy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index", seed=0, list_actions=False))
    turns: dict[str, list[int]] = {}
    for lines, (task, episodes) in played.items():
        for episode in episodes:
            steps = [step for step, _, _ in episode]
            lengths = [len(policy.input_ids(task, steps[:n], step.observation)) for n, step in enumerate(steps)]
            turns.setdefault(lines, []).extend(b - a for a, b in itertools.pairwise(lengths))
    return turns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-19", help="the family's games (training seeds)")
    parser.add_argument("--max-steps", type=int, default=8, help="the random policy's step limit")
    args = parser.parse_args()
    from dreamgym.cli._common import parse_seeds
    from dreamgym.simulator import ExperienceModelConfig, TemplateConfig
    from dreamgym.simulator._sft import ScratchModelConfig, train_tokenizer
    from dreamgym.simulator._templates import answer_text
    from dreamgym.textworlds import TURN_TOKENS

    seeds = list(parse_seeds(args.seeds))
    budget = ExperienceModelConfig().sampling.max_new_tokens
    template = TemplateConfig()
    played = {lines: anyio.run(_episodes, seeds, lines, args.max_steps) for lines in SETTINGS}
    answers = {
        lines: [answer_text(template, observation=step.observation, next_observation=step.next_observation,
                            reward=reward, done=ended) for episode in episodes for step, reward, ended in episode]
        for lines, (_, episodes) in played.items()
    }  # fmt: skip
    pages = {
        lines: [step.observation.state for episode in episodes for step, _, _ in episode]
        for lines, (_, episodes) in played.items()
    }
    texts = [text for setting in (*answers.values(), *pages.values()) for text in setting]
    tokenizer = train_tokenizer(texts, ScratchModelConfig().vocab_size, split="whitespace")
    turns = _policy_turns(played)
    for lines in SETTINGS:
        answer_tokens = sorted(len(tokenizer(text)["input_ids"]) for text in answers[lines])
        page_tokens = sorted(len(tokenizer(text)["input_ids"]) for text in pages[lines])
        print(json.dumps({
            "probe": "textworld_lines", "lines": lines, "games": len(seeds), "answers": len(answer_tokens),
            "answer_tokens_median": statistics.median(answer_tokens),
            "answer_tokens_p90": answer_tokens[int(0.9 * (len(answer_tokens) - 1))],
            "answer_tokens_max": answer_tokens[-1],
            "answer_tokens_total": sum(answer_tokens),
            "answers_over_budget": sum(n > budget for n in answer_tokens), "budget_tokens": budget,
            "page_tokens_median": statistics.median(page_tokens),
            "policy_turn_tokens_mean": round(statistics.mean(turns[lines]), 1),
            "policy_turn_tokens_max": max(turns[lines]), "policy_turn_bound": TURN_TOKENS,
        }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
