"""Probe: two builds of one recipe decoded as one (their next-token probabilities averaged): cleaner than each?

    python benchmarks/probes/ensemble_builds.py --from DEMO_OUT --episodes DIR BUILD_A BUILD_B

Builds of the demo-size experience model differ by training seed as much as
recipes do (``docs/findings.md``): one answers 0.99 of a task's first answers
clean, another 0.76, and each fails on its own steps. This probe asks whether
the failures are the builds' own: it replays the validation episodes of
``benchmarks/open_loop_outcomes.py`` (``--episodes``, its seeds and policies)
through BUILD_A with every next token drawn from the mixture of BUILD_A's and
BUILD_B's distributions (the mean of their probabilities: a deep ensemble),
the copy guard, BUILD_A's judge and retrieval as the demo's, and prints the
same per-task rows as ``open_loop_outcomes.py`` (first answers applied with
nothing overruled, kept as written, real wins and losses paid). The two builds
must share a tokenizer (builds of one recipe on one seed set do). Each token
costs both models' passes. A one-off probe: no results file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


class PairCache:
    """The two members' KV caches, as one: what the backend does to its cache it does to both."""

    def __init__(self, caches: list[Any]) -> None:
        self.caches = caches

    def get_seq_length(self, layer: int = 0) -> int:
        return int(self.caches[0].get_seq_length(layer))

    def batch_select_indices(self, indices: Any) -> None:
        for cache in self.caches:
            cache.batch_select_indices(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        for cache in self.caches:
            cache.batch_repeat_interleave(repeats)


class Mixture:
    """Two causal LMs as one: logits are the log of the mean of their next-token probabilities."""

    def __init__(self, first: Any, second: Any) -> None:
        self.members = (first, second)
        self.config = first.config
        self.generation_config = getattr(first, "generation_config", None)

    def eval(self) -> Mixture:
        for member in self.members:
            member.eval()
        return self

    def parameters(self) -> Any:
        return self.members[0].parameters()

    def __call__(self, *, cache: Any = None, **inputs: Any) -> Any:
        import math

        import torch
        from transformers import DynamicCache

        if not isinstance(cache, PairCache):  # a fresh cache from the backend: one per member
            cache = PairCache([DynamicCache(config=member.config) for member in self.members])
        outs = [member(**inputs, cache=own) for member, own in zip(self.members, cache.caches, strict=True)]
        logprobs = torch.stack([torch.log_softmax(out.logits.float(), dim=-1) for out in outs])
        mixed = torch.logsumexp(logprobs, dim=0) - math.log(len(outs))

        class Out:
            logits = mixed

        Out.cache = cache  # type: ignore[attr-defined]
        return Out


async def _replay(kept: Path, first: Path, second: Path, by_source: dict[str, list[list[Any]]]) -> Any:
    import open_loop_outcomes as olo

    import dreamgym.simulator as simulator
    from dreamgym.simulator.backends import LocalBackend

    plain = simulator.load_experience_model

    def load_mixed(path: Any, **kwargs: Any) -> Any:
        model = plain(path, **kwargs)
        other = LocalBackend.load(second)
        if other.tokenizer.get_vocab() != model.backend.tokenizer.get_vocab():
            raise SystemExit(f"{first} and {second} do not share a tokenizer: they cannot be decoded as one")
        model.backend.model = Mixture(model.backend.model, other.model)
        model.backend.prefix_cache = False  # a reused prefix is one member's cache
        model.backend.backend_id += f"+{other.backend_id}"  # never one member's cached answers
        return model

    simulator.load_experience_model = load_mixed  # open_loop_outcomes._replay loads the model through it
    try:
        return await olo._replay(kept, first, True, True, by_source)
    finally:
        simulator.load_experience_model = plain


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, required=True, help="a finished demo (its seed set)")
    parser.add_argument("--episodes", type=Path, required=True, help="open_loop_outcomes.py's validation episodes")
    parser.add_argument("--seeds", default="2000-2029", help="validation seeds (as the episodes were collected)")
    parser.add_argument("--temperature", type=float, default=0.5, help="the policies' sampling temperature")
    parser.add_argument("builds", type=Path, nargs=2, help="two builds of one recipe (demo_sim_builds.py's)")
    args = parser.parse_args()
    import open_loop_outcomes as olo

    seeds = olo._seeds(parser, args.seeds)
    episodes = anyio.run(olo._collect, args.kept, args.episodes, seeds, olo._demo_policies(args.kept),
                         args.temperature)  # fmt: skip
    first, second = args.builds
    counts, judge = anyio.run(_replay, args.kept, first, second, episodes)
    olo._rows(counts, first.with_name(f"{first.name}&{second.name}"), True, judge, True)  # prints each row
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
