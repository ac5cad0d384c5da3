"""Replay store figures, each beside a baseline measured in the same run (JSON lines on stdout).

    python benchmarks/replay_bench.py            # full: 50k ingest, nearest at 10k and 100k
    python benchmarks/replay_bench.py --quick    # smaller sizes
    python benchmarks/replay_bench.py --commit-results   # also write benchmarks/results/replay_bench.json

Figures:
- ``ingest_deferred``: steps/s through ``append`` (batches of 500, indexing
  deferred, fsync on) vs raw LMDB ``putmulti`` of the same bytes, one
  transaction per batch, fsync on.
- ``ingest_concurrent_single``: steps/s when 64 tasks each append one step at a
  time (group commit) vs raw LMDB with one fsynced transaction per step.
- ``ingest_indexed_<embedder>``: steps/s for append + flush (embedding,
  vector commit, index) vs the embedder alone on the same texts.
- ``nearest_<data>_<n>``: top-10 ``nearest`` p50/p99 latency and recall@10 vs
  exact, against single-query numpy exact search on the same vectors.
  ``data`` is ``text-hashing`` (realistic state texts, hashing embedder, 384-d),
  ``text-minilm`` (realistic texts, all-MiniLM-L6-v2; embeddings cached under
  .cache/bench) or ``random`` (uniform random unit vectors, 384-d).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import lmdb
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _corpus import transitions
from _report import emit as _emit
from _report import provenance

from dreamgym.core import Step, Task, encode_record
from dreamgym.replay import (
    AnnSettings,
    HashingEmbedder,
    LmdbReplayStore,
    MiniLMEmbedder,
    StoreConfig,
    transition_text,
)

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "bench"
RESULTS = Path(__file__).resolve().parent / "results" / "replay_bench.json"
ROWS: list[dict[str, Any]] = []


def emit(*args: Any, **kwargs: Any) -> None:
    """Print a figure's row (``_report.emit``) and keep it for the results file."""
    ROWS.append(_emit(*args, **kwargs))


def corpus(n: int, seed: int) -> tuple[list[Task], list[Step], list[str]]:
    tasks: dict[str, Task] = {}
    steps, texts = [], []
    for instruction, step in transitions(n, seed):
        tasks[step.task_id] = Task(task_id=step.task_id, instruction=instruction)
        steps.append(step)
    # A task id may have been drawn for two instructions; the stored task wins, as in the store.
    for step in steps:
        texts.append(transition_text(tasks[step.task_id].instruction, str(step.action), step.observation.state))
    return list(tasks.values()), steps, texts


class TableEmbedder:
    """Returns precomputed vectors for known texts (the benchmark's stand-in for a slow model)."""

    def __init__(self, name: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        self.name, self.dim = name, vectors.shape[1]
        self.table = dict(zip(texts, vectors, strict=True))

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


# --------------------------------------------------------------------------- ingest


def raw_lmdb(path: Path, payloads: list[bytes], batch: int) -> float:
    env = lmdb.open(str(path), map_size=1 << 36, sync=True, metasync=True)
    start = time.perf_counter()
    for i in range(0, len(payloads), batch):
        items = [((j + 1).to_bytes(8, "big"), payloads[j]) for j in range(i, min(i + batch, len(payloads)))]
        with env.begin(write=True) as txn:
            txn.cursor().putmulti(items, append=True)
    elapsed = time.perf_counter() - start
    env.close()
    return len(payloads) / elapsed


async def ingest_deferred(tmp: Path, tasks: list[Task], steps: list[Step], batch: int) -> float:
    async with LmdbReplayStore(tmp, embedder=HashingEmbedder(384), config=StoreConfig(auto_index=False)) as store:
        for task in tasks:
            await store.put_task(task)
        start = time.perf_counter()
        for i in range(0, len(steps), batch):
            await store.append(steps[i : i + batch])
        return len(steps) / (time.perf_counter() - start)


async def ingest_concurrent(tmp: Path, steps: list[Step], writers: int) -> float:
    async with LmdbReplayStore(tmp, embedder=HashingEmbedder(384), config=StoreConfig(auto_index=False)) as store:
        start = time.perf_counter()

        async def writer(w: int) -> None:
            for step in steps[w::writers]:
                await store.append([step])

        async with anyio.create_task_group() as tg:
            for w in range(writers):
                tg.start_soon(writer, w)
        return len(steps) / (time.perf_counter() - start)


async def ingest_indexed(tmp: Path, tasks: list[Task], steps: list[Step], embedder: Any) -> float:
    async with LmdbReplayStore(tmp, embedder=embedder, config=StoreConfig(auto_index=False)) as store:
        for task in tasks:
            await store.put_task(task)
        start = time.perf_counter()
        for i in range(0, len(steps), 500):
            await store.append(steps[i : i + 500])
        await store.flush()
        return len(steps) / (time.perf_counter() - start)


def run_ingest(work: Path, n: int, minilm_n: int) -> None:
    tasks, steps, texts = corpus(n, seed=1)
    payloads = [encode_record(s) for s in steps]
    mean_bytes = sum(map(len, payloads)) / len(payloads)
    raw = raw_lmdb(work / "raw", payloads, 500)
    ours = anyio.run(ingest_deferred, work / "deferred", tasks, steps, 500)
    emit(
        "ingest_deferred",
        ours,
        "steps/s",
        "raw lmdb putmulti, same bytes, 500/txn",
        raw,
        n=n,
        mean_step_bytes=round(mean_bytes),
        target=">= 10000 steps/s",
    )

    single = steps[: min(n, 5000)]
    raw1 = raw_lmdb(work / "raw1", payloads[: len(single)], 1)
    ours1 = anyio.run(ingest_concurrent, work / "concurrent", single, 64)
    emit(
        "ingest_concurrent_single",
        ours1,
        "steps/s",
        "raw lmdb, one fsynced txn per step",
        raw1,
        n=len(single),
        writers=64,
    )

    hashing = HashingEmbedder(384)
    k = min(n, 20000)
    start = time.perf_counter()
    hashing.embed_sync(texts[:k])
    alone = k / (time.perf_counter() - start)
    rate = anyio.run(ingest_indexed, work / "hashing", tasks, steps[:k], hashing)
    emit("ingest_indexed_hashing-384", rate, "steps/s", "hashing embedder alone", alone, n=k)

    if MiniLMEmbedder.available() and minilm_n:
        minilm = MiniLMEmbedder()
        minilm.embed_sync(texts[:8])  # load the model outside the timings
        start = time.perf_counter()
        minilm.embed_sync(texts[:minilm_n])
        alone = minilm_n / (time.perf_counter() - start)
        rate = anyio.run(ingest_indexed, work / "minilm", tasks, steps[:minilm_n], minilm)
        emit("ingest_indexed_minilm", rate, "steps/s", "MiniLM embedder alone", alone, n=minilm_n)


# --------------------------------------------------------------------------- nearest


def minilm_vectors(texts: list[str], tag: str) -> np.ndarray:
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:12]  # the texts, not just their count
    path = CACHE / f"minilm-{tag}-{len(texts)}-{digest}.npy"
    if path.exists():
        return np.load(path)
    vectors = MiniLMEmbedder().embed_sync(texts)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


Dataset = tuple[list[Task], list[Step], Any, np.ndarray, np.ndarray]


def dataset(kind: str, n: int, queries: int) -> Dataset:
    """Tasks, steps, an embedder for them, the vectors it gives the steps, and query vectors."""
    tasks, steps, texts = corpus(n, seed=2)
    _, _, query_texts = corpus(queries, seed=3)
    if kind == "text-hashing":
        embedder = HashingEmbedder(384)
        return tasks, steps, embedder, embedder.embed_sync(texts), embedder.embed_sync(query_texts)
    if kind == "text-minilm":
        vectors = minilm_vectors(texts, "store")
        embedder = TableEmbedder(MiniLMEmbedder.name, texts, vectors)
        return tasks, steps, embedder, vectors, minilm_vectors(query_texts, "query")
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = rng.standard_normal((queries, 384)).astype(np.float32)
    query /= np.linalg.norm(query, axis=1, keepdims=True)
    return tasks, steps, TableEmbedder("random-384", texts, vectors), vectors, query


async def measure_nearest(path: Path, data: Dataset, ann: AnnSettings) -> dict[str, Any]:
    tasks, steps, embedder, matrix, queries = data
    config = StoreConfig(auto_index=False, ann=ann, sync=False)
    async with LmdbReplayStore(path, embedder=embedder, config=config) as store:
        for task in tasks:
            await store.put_task(task)
        for i in range(0, len(steps), 2000):
            await store.append(steps[i : i + 2000])
        start = time.perf_counter()
        await store.flush()
        build_s = time.perf_counter() - start
        seqs = np.arange(1, len(steps) + 1)  # every step is real, so step i has vector i
        latencies, recalls, exact_latencies = [], [], []
        for query in queries:
            t0 = time.perf_counter()
            hits = await store.nearest(query, 10)
            latencies.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            scores = matrix @ query
            top = np.argpartition(-scores, 9)[:10]
            exact_latencies.append(time.perf_counter() - t0)
            truth = {int(seqs[i]) for i in top}
            recalls.append(len(truth & {h.seq for h in hits}) / 10)
        stats = await store.stats()
    return {
        "p50_ms": 1e3 * float(np.percentile(latencies, 50)),
        "p99_ms": 1e3 * float(np.percentile(latencies, 99)),
        "exact_p50_ms": 1e3 * float(np.percentile(exact_latencies, 50)),
        "exact_p99_ms": 1e3 * float(np.percentile(exact_latencies, 99)),
        "recall": float(np.mean(recalls)),
        "index_build_s": build_s,
        "indexed": stats.index_covered_upto > 0,
    }


def run_nearest(work: Path, sizes: list[int], kinds: list[str], queries: int, ann: AnnSettings) -> None:
    for kind in kinds:
        for n in sizes:
            data = dataset(kind, n, queries)
            path = work / f"nearest-{kind}-{n}"
            result = anyio.run(measure_nearest, path, data, ann)
            shutil.rmtree(path, ignore_errors=True)
            common = dict(
                n=n,
                queries=queries,
                recall_at_10=round(result["recall"], 4),
                index_build_s=round(result["index_build_s"], 1),
                usearch=result["indexed"],
                ann=dict(
                    connectivity=ann.connectivity,
                    expansion_add=ann.expansion_add,
                    expansion_search=ann.expansion_search,
                ),
            )
            emit(
                f"nearest_{kind}_{n}_p50",
                result["p50_ms"],
                "ms",
                "numpy exact single query p50",
                result["exact_p50_ms"],
                **common,
            )
            emit(
                f"nearest_{kind}_{n}_p99",
                result["p99_ms"],
                "ms",
                "numpy exact single query p99",
                result["exact_p99_ms"],
                **common,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (about two minutes)")
    parser.add_argument("--only", choices=["ingest", "nearest"], default=None)
    parser.add_argument("--sizes", default=None, help="comma-separated store sizes for nearest")
    parser.add_argument("--kinds", default="text-hashing,text-minilm,random")
    parser.add_argument("--minilm-n", type=int, default=None, help="texts embedded with MiniLM")
    parser.add_argument("--connectivity", type=int, default=AnnSettings().connectivity)
    parser.add_argument("--expansion-add", type=int, default=AnnSettings().expansion_add)
    parser.add_argument("--expansion-search", type=int, default=AnnSettings().expansion_search)
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/replay_bench.json")
    args = parser.parse_args()
    run = provenance()  # first: the commit the run started from
    sizes = (
        [int(s) for s in args.sizes.split(",")] if args.sizes else ([2000, 25000] if args.quick else [10000, 100000])
    )
    minilm_n = args.minilm_n if args.minilm_n is not None else (300 if args.quick else 1000)
    ann = AnnSettings(args.connectivity, args.expansion_add, args.expansion_search)
    with tempfile.TemporaryDirectory(prefix="dreamgym-bench-") as tmp:
        work = Path(tmp)
        if args.only in (None, "ingest"):
            run_ingest(work, 5000 if args.quick else 50000, minilm_n)
        if args.only in (None, "nearest"):
            kinds = args.kinds.split(",")
            if not MiniLMEmbedder.available():
                kinds = [k for k in kinds if k != "text-minilm"]
            text_minilm_sizes = [s for s in sizes if s <= (2000 if args.quick else 10000)]
            for kind in kinds:
                run_nearest(work, text_minilm_sizes if kind == "text-minilm" else sizes, [kind], 200, ann)
    if args.commit_results:
        RESULTS.write_text(json.dumps({**run, "rows": ROWS}, indent=1) + "\n")
        print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
