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
``max_new_tokens``), which it cannot finish. A one-off probe: no results file.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from typing import Any

import anyio

SETTINGS = ("sentence", "paragraph")


async def _episodes(seeds: list[int], lines: str, max_steps: int) -> list[list[tuple[Any, Any, float, bool]]]:
    """Per episode, its transitions (page, next page, reward, ended): the walkthrough's, then a random policy's."""
    from dreamgym.core import parse_state
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
                    transitions.append((observation, result.observation, result.reward, ended))
                    observation = result.observation
                    if ended:
                        break
                episodes.append(transitions)
    finally:
        await env.aclose()
    return episodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-19", help="the family's games (training seeds)")
    parser.add_argument("--max-steps", type=int, default=8, help="the random policy's step limit")
    args = parser.parse_args()
    from dreamgym.cli._common import parse_seeds
    from dreamgym.simulator import ExperienceModelConfig, TemplateConfig
    from dreamgym.simulator._sft import ScratchModelConfig, train_tokenizer
    from dreamgym.simulator._templates import answer_text

    seeds = list(parse_seeds(args.seeds))
    budget = ExperienceModelConfig().sampling.max_new_tokens
    template = TemplateConfig()
    answers: dict[str, list[str]] = {}
    pages: dict[str, list[str]] = {}
    for lines in SETTINGS:
        episodes = anyio.run(_episodes, seeds, lines, args.max_steps)
        steps = [step for episode in episodes for step in episode]
        answers[lines] = [
            answer_text(template, observation=before, next_observation=after, reward=reward, done=ended)
            for before, after, reward, ended in steps
        ]
        pages[lines] = [before.state for before, _, _, _ in steps]
    texts = [text for setting in (*answers.values(), *pages.values()) for text in setting]
    tokenizer = train_tokenizer(texts, ScratchModelConfig().vocab_size, split="whitespace")
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
        }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
