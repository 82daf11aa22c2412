"""MinHash-LSH near-duplicate removal, Chinese-aware (see ``_minhash`` for shingles and hashing).

What is hashed is each document as every copy of it reads alike, not as earlier stages happened
to edit one copy: with ``exclude_boilerplate`` (and a paragraph_dedup earlier in the recipe), the
document without the paragraphs paragraph_dedup found in more than its ``max_docs`` documents,
whichever copy it kept them in (``_paragraphs.without_boilerplate``; so boilerplate shared by
unrelated documents never makes them near duplicates, and a paragraph kept in one copy only
never sets two copies apart); with ``fold_regional``, Taiwan / Hong Kong phrasings folded to the
mainland's (``_regional``). Neither changes the text that is kept.

compute (per task, vectorised): simplify -> shingle (CJK character n-grams or word n-grams, per
  document) -> signature (uint32 x num_perm) -> band keys (uint64 x bands). Spilled under the
  stage's work directory through renames: ``<task>.bands.parquet`` (id, length, shingle count,
  a short preview, one uint64 column per band) and, for ``verify: exact``, ``<task>.shingles.u32``
  + ``<task>.offsets.i64`` (the shingle sets, ~4 bytes per distinct shingle: about the size of
  the text), else ``<task>.sig.u32`` (signatures, 4 x num_perm bytes per document); both are read
  through memory maps (``_minhash_spill``: the writer, the shared layout and the readers).
decide: rounds of jobs spread over the run's workers (:class:`dataprep.decide_jobs.DecideJobs`:
  the process pool or Ray tasks; one named job dataclass and one function per round, in
  ``_minhash_rounds``), exchanging files under
  ``<work>/lsh`` (a shuffle through the file system); the driver only sizes the rounds and
  merges counters (memory O(tasks + calls)).
  1. per task: document lengths and ids for random access; per band, the band keys with their
     low ceil(log2 docs) bits replaced by the document's corpus position, sorted (documents
     without shingles are never candidates).
  2. per key-range partition (top bits of the keys, ~LSH_PARTITION_KEYS keys each): for every
     band, the keys of that range from every task (binary search in the sorted files), sorted;
     groups of equal keys give candidate pairs (all pairs of small groups, a star and a chain for
     large ones); the distinct pairs are written, routed by a hash of the pair.
  3. per pair bucket: the distinct candidate pairs (each verified once, whatever the number of
     bands it came from): ``signature`` = estimated Jaccard >= threshold, ``exact`` = Jaccard of
     the shingle sets >= threshold, ``none``; accepted pairs become edges.
  4. connected components of the edges with the large-star / small-star algorithm
     (``_components``: a few rounds, one bucket of edges per call, never the whole graph in
     one place), ending in one star per cluster centred on its smallest position.
  5. per edge bucket: each cluster's centre sees all its members: the survivor is the longest
     document (characters), then the earliest in corpus order (task, then row); the others get
     their survivor, the cluster size and their similarity to the survivor.
  6. per task: its dropped documents, with their survivors' ids, as ``<task>.decision.json``.
  The clusters are the connected components of the verified candidate pairs, exactly as a
  single-process union-find over the same pairs finds them, so the decisions do not depend on
  the partition or bucket counts (which grow with the worker count and the corpus). Cluster id
  = the survivor's corpus position.
apply: (first deleting the task's spilled files, no longer needed once decided) the other
  members are dropped as ``near_duplicate``; score = their similarity to the
  survivor (exact Jaccard with ``verify: exact``, else the signature estimate); rejected/ records
  carry ``extra`` = {"cluster", "survivor", "cluster_size", "similarity"}.
stats: histogram ``cluster_size``; counters ``clusters``, ``cross_script_clusters`` (members in
  more than one script, as lang_id's ``meta["script"]`` says: a Traditional and a Simplified
  copy), ``docs_in_clusters``,
  ``candidate_pairs`` (summed over bands), ``pairs_verified`` and ``pairs_rejected`` (distinct
  pairs), ``no_shingles``, ``component_rounds``; examples of clusters (members side by side) for
  report.html (members side by side, what differs from the survivor marked); bands/rows in
  manifest.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from dataprep.decide_jobs import DecideJobs, share
from dataprep.document import Document, Drop
from dataprep.stage import DriverContext, GlobalStage, StageContext, StageResult, param, register
from dataprep.stats import Histogram
from stages import _minhash as mh
from stages import _minhash_lsh as lsh
from stages import _paragraphs as para
from stages import _regional
from stages._components import bucket_bits, connected_components, fileset, remove_files
from stages._decisions import DecisionReplay
from stages._keyspill import PARALLEL_MIN, read_rows
from stages._minhash_rounds import (
    CLUSTER_EDGES,
    CandidatesJob,
    DecisionJob,
    IndexJob,
    SurvivorsJob,
    VerifyJob,
    choose_survivors,
    find_candidates,
    index_task,
    verify_pairs,
    write_task_decision,
)
from stages._minhash_spill import SCRIPTS, SPILL_SUFFIXES, Layout, TaskSpill

# Decide is spread over the run's workers (DecideJobs) in rounds; each call holds one
# partition or bucket, whose sizes these budgets bound (the counts adapt to the corpus; below
# PARALLEL_MIN keys, pairs or edges a round is one call, with no worker start-up).
LSH_PARTITION_KEYS = 1 << 25  # band keys per key-range partition in round 2 (8 bytes each)
PAIR_BUCKET = 1 << 23  # candidate pairs per verification call (24 bytes each)
EDGE_BUCKET = 1 << 23  # edge records per connected-components call (24 bytes each)


@dataclass
class MinhashDedupParams:
    threshold: float = param(0.8, help="Jaccard similarity at or above which documents are near duplicates")
    num_perm: int = param(128, help="hash functions per signature")
    ngram_cjk: int = param(5, help="shingle length in characters for CJK documents")
    ngram_word: int = param(5, help="shingle length in words for other documents")
    fold_variants: bool = param(
        True, help="fold Traditional to Simplified characters before shingling (OpenCC t2s per character)"
    )
    fold_regional: bool = param(
        True,
        help="fold Taiwan / Hong Kong phrasings to the mainland's before shingling (OpenCC's regional "
        "phrase tables; 伺服器 -> 服务器): only the hashed text, never the kept one",
    )
    exclude_boilerplate: bool = param(
        True,
        help="shingle each document without the paragraphs an earlier paragraph_dedup found in more "
        "than max_docs documents, in every copy alike (the kept text follows paragraph_dedup)",
    )
    bands: int = param(0, help="LSH bands; 0: chosen with rows from threshold and the weights")
    rows: int = param(0, help="signature rows per band; 0: chosen with bands")
    fp_weight: float = param(0.05, help="weight of the false-positive area when choosing bands x rows")
    fn_weight: float = param(
        0.95, help="weight of the false-negative area (high: more candidates, verification drops the excess)"
    )
    verify: Literal["none", "signature", "exact"] = param(
        "exact",
        help="check candidate pairs: estimated Jaccard (signature), Jaccard of the shingle sets "
        "(exact; spills ~the text size to disk), or not at all (none)",
    )
    preview_chars: int = param(200, help="characters of each document kept for report examples")
    examples: int = param(5, help="clusters shown in report.html")

    def validate(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        if not 1 <= self.num_perm <= 1024:
            raise ValueError("num_perm must be in 1..1024")
        if self.ngram_cjk < 1 or self.ngram_word < 1:
            raise ValueError("ngram_cjk and ngram_word must be >= 1")
        if (self.bands == 0) != (self.rows == 0):
            raise ValueError("set both bands and rows, or neither")
        if self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands x rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}")
        if self.fp_weight < 0 or self.fn_weight < 0 or self.fp_weight + self.fn_weight == 0:
            raise ValueError("fp_weight and fn_weight must be >= 0 and not both 0")

    def band_shape(self) -> tuple[int, int]:
        if self.bands:
            return self.bands, self.rows
        return lsh.optimal_bands(self.threshold, self.num_perm, self.fp_weight, self.fn_weight)


def _table_versions(fold_variants: bool, fold_regional: bool) -> dict[str, str]:
    """Versions of the data behind the simplification tables (shingles depend on them)."""
    import unicodedata
    from importlib.metadata import PackageNotFoundError, version

    out = {"unicode": unicodedata.unidata_version}
    if fold_variants:
        try:
            out["opencc"] = version("opencc")
        except PackageNotFoundError:
            out["opencc"] = "unknown"
    if fold_regional:
        out["regional_phrases"] = _regional.table_version()
    return out


@register
class MinhashDedup(GlobalStage):
    """Drop near duplicates (MinHash LSH on CJK character / word shingles), one survivor per cluster."""

    name = "minhash_dedup"
    Params = MinhashDedupParams
    uses = ("boilerplate_paragraphs",)  # with exclude_boilerplate, when paragraph_dedup runs before

    def __init__(self, params: MinhashDedupParams):
        super().__init__(params)
        self._spill: TaskSpill | None = None
        self._hasher: lsh.MinHasher | None = None
        self._hasher_seed: int | None = None
        self._replay: DecisionReplay | None = None
        self._boilerplate: tuple[str, para.BoilerplateSet] | None = None

    def _hashed_texts(self, batch: list[Document], ctx: StageContext) -> list[str]:
        """The texts to shingle: without the corpus-wide boilerplate paragraphs when
        paragraph_dedup published them (``exclude_boilerplate``); regional phrasing is folded by
        the shingler (``fold_regional``)."""
        texts = [d.text for d in batch]
        found = ctx.artifacts.get("boilerplate_paragraphs") if self.params.exclude_boilerplate else None
        if not found or not found["count"]:
            return texts
        if self._boilerplate is None or self._boilerplate[0] != found["path"]:
            self._boilerplate = (found["path"], para.BoilerplateSet(found["path"]))
        before = sum(map(len, texts))
        texts = para.without_boilerplate(texts, found["unit"], found["min_chars"], self._boilerplate[1])
        ctx.stats.count("boilerplate_chars_not_hashed", before - sum(map(len, texts)))
        return texts

    def setup(self, ctx: DriverContext) -> None:
        self.params.band_shape()

    def begin_task(self, ctx: StageContext) -> None:
        self._spill = None
        self._replay = None

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        p = self.params
        bands, rows = p.band_shape()
        if self._spill is None:
            self._spill = TaskSpill(ctx.work_dir, ctx.task_id, bands, p.verify == "exact")
        if self._hasher is None or self._hasher_seed != ctx.seed:
            self._hasher, self._hasher_seed = lsh.MinHasher(p.num_perm, ctx.seed), ctx.seed
        shingles = mh.shingle_batch(
            self._hashed_texts(batch, ctx), p.ngram_cjk, p.ngram_word, p.fold_variants, p.fold_regional
        )
        sig = self._hasher.signatures(shingles)
        keys = lsh.band_keys(sig, bands, rows)
        self._spill.write(batch, shingles, sig, keys, p.preview_chars)
        ctx.stats.count("cjk_documents", int(np.count_nonzero(shingles.cjk & (shingles.sizes() > 0))))

    def finish_compute(self, ctx: StageContext) -> None:
        if self._spill is None:  # a task without documents still leaves its (empty) files
            self._spill = TaskSpill(
                ctx.work_dir, ctx.task_id, self.params.band_shape()[0], self.params.verify == "exact"
            )
        self._spill.close()
        self._spill = None

    def decide(self, ctx: DriverContext) -> dict:
        import shutil

        import pyarrow.parquet as pq

        from dataprep.progress import phase_bar

        p = self.params
        bands, rows = p.band_shape()
        counts = [pq.ParquetFile(ctx.work_dir / f"{t}.bands.parquet").metadata.num_rows for t in ctx.task_ids]
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        n = int(offsets[-1])
        layout = Layout(
            str(ctx.work_dir), list(ctx.task_ids), offsets.tolist(), p.num_perm, bands, p.verify,
            p.threshold, p.examples,
        )  # fmt: skip
        shutil.rmtree(layout.lsh, ignore_errors=True)  # an interrupted earlier attempt
        layout.lsh.mkdir()
        shared = share(layout.lsh / "layout.json", layout)
        jobs = DecideJobs(ctx)

        def spread(total: int, budget: int) -> int:  # calls of a round
            return 1 << bucket_bits(total, budget, ctx.workers if total >= PARALLEL_MIN else 1)

        tasks = range(len(ctx.task_ids))
        title = f"minhash_dedup: indexing the band keys of {n:,} docs (LSH {bands} bands x {rows} rows)"
        bar = phase_bar(title, None, "round", quiet=ctx.quiet)

        def step(what: str) -> None:  # one round done, the next one starts
            bar.update(1)
            bar.set_description(f"minhash_dedup: {what}")

        indexed = jobs.map(index_task, [IndexJob(shared, t) for t in tasks])
        keyed = sum(r.keyed for r in indexed)
        partitions = spread(keyed * bands, LSH_PARTITION_KEYS)
        step(f"candidate pairs of {keyed:,} docs x {bands} bands in {partitions} partitions")
        found = jobs.map(find_candidates, [CandidatesJob(shared, k, partitions) for k in range(partitions)])
        pair_buckets = spread(sum(r.distinct for r in found), PAIR_BUCKET)
        step(f"verifying pairs in {pair_buckets} buckets ({p.verify})")
        checked = jobs.map(
            verify_pairs, [VerifyJob(shared, q, pair_buckets, partitions) for q in range(pair_buckets)]
        )
        remove_files(fileset(layout.lsh, "cand", partitions))
        edges = fileset(layout.lsh, "edge", pair_buckets)
        buckets = spread(2 * sum(r.edges for r in checked), EDGE_BUCKET)
        final, rounds = connected_components(
            jobs.map,
            edges,
            buckets,
            layout.lsh,
            on_round=lambda k: step(f"connected components, round {k + 1} ({buckets} buckets)"),
        )
        step("choosing survivors")
        survivor_jobs = [SurvivorsJob(shared, b, final, buckets) for b in range(buckets)]
        results = jobs.map(choose_survivors, survivor_jobs)
        step(f"writing the decisions of {len(ctx.task_ids)} tasks")
        jobs.map(write_task_decision, [DecisionJob(shared, t, buckets) for t in tasks])
        bar.update(1)
        bar.close()
        hist = ctx.stats.histogram("cluster_size", CLUSTER_EDGES)
        for r in results:
            hist.merge(Histogram.from_json(r.cluster_size))
        for name, value in (
            ("clusters", sum(r.clusters for r in results)),
            ("cross_script_clusters", sum(r.cross_script_clusters for r in results)),
            ("docs_in_clusters", sum(r.docs_in_clusters for r in results)),
            ("candidate_pairs", sum(r.candidates for r in found)),
            ("pairs_verified", sum(r.verified for r in checked)),
            ("pairs_rejected", sum(r.rejected for r in checked)),
            ("no_shingles", sum(r.no_shingles for r in indexed)),
            ("component_rounds", rounds),
        ):
            ctx.stats.count(name, value)
        examples = sorted((e for r in results for e in r.examples), key=lambda e: e[0])[: p.examples]
        self._examples(ctx, offsets, examples)
        shutil.rmtree(layout.lsh)
        return {
            "minhash_dedup": {
                "threshold": p.threshold,
                "num_perm": p.num_perm,
                "bands": bands,
                "rows": rows,
                "verify": p.verify,
                "shingles": {
                    "cjk_chars": p.ngram_cjk,
                    "words": p.ngram_word,
                    "fold_variants": p.fold_variants,
                    "fold_regional": p.fold_regional,
                    "exclude_boilerplate": p.exclude_boilerplate,
                    **_table_versions(p.fold_variants, p.fold_regional),
                },
            }
        }

    def _examples(
        self, ctx: DriverContext, offsets: np.ndarray, examples: list[tuple[int, int, list[int]]]
    ) -> None:
        """Report examples: clusters as (survivor, size, up to 4 members, survivor first)."""
        wanted = np.unique(np.asarray([m for _, _, group in examples for m in group], dtype=np.int64))
        previews: dict[int, tuple[str, str]] = {}
        task = np.searchsorted(offsets, wanted, side="right") - 1
        for t in np.unique(task):
            sel = wanted[task == t]
            path = ctx.work_dir / f"{ctx.task_ids[int(t)]}.bands.parquet"
            got = read_rows(path, ["id", "preview", "script"], sel - offsets[t])
            for pos, doc_id, text, code in zip(
                sel.tolist(), got["id"], got["preview"], got["script"], strict=True
            ):
                previews[pos] = (doc_id, text, SCRIPTS[code] if code < len(SCRIPTS) else "other")
        for survivor, size, group in examples:
            items = []
            for k, pos in enumerate(group):
                doc_id, text, script = previews[pos]
                label = f"{'kept' if k == 0 else 'dropped'}: {doc_id}" + (f" ({script})" if script else "")
                items.append({"label": label, "text": text})
            ctx.stats.add_example(f"cluster {survivor} ({size} documents)", items, compare=True)

    def apply(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        if self._replay is None:
            self._replay = DecisionReplay(ctx.work_dir / f"{ctx.task_id}.decision.json")
            for suffix in SPILL_SUFFIXES:  # decided: the spills are no longer needed
                (ctx.work_dir / f"{ctx.task_id}{suffix}").unlink(missing_ok=True)
        out: list[StageResult] = []
        for doc in batch:
            d = self._replay.next()
            if d is None:
                out.append(doc)
                continue
            extra = {
                "cluster": d["cluster"],
                "survivor": d["survivor"],
                "cluster_size": d["size"],
                "similarity": d["score"],
            }
            detail = (
                f"near duplicate of {d['survivor']} (similarity {d['score']:.3f}, "
                f"cluster {d['cluster']} of {d['size']} documents)"
            )
            out.append(Drop(doc, "near_duplicate", score=d["score"], detail=detail, extra=extra))
        return out
