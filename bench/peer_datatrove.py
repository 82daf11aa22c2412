"""The closest datatrove equivalent of the default recipe (run inside a venv with datatrove).

Usage: python peer_datatrove.py INPUT_DIR WORK_DIR --tokenizer tokenizer.json --workers N [--eos-token T]

Stages, in datatrove's terms: JsonlReader → FTFYFormatter (Unicode repair) → PIIFormatter →
GopherRepetitionFilter (the repetition filter that is not English-specific) → JsonlWriter;
then MinHash in its 4 steps (signatures on word 5-grams with datatrove's Chinese word tokenizer,
spaCy + jieba; buckets; clustering; filtering); then DocumentTokenizer with the same
tokenizer.json as ours (its end-of-document token: --eos-token, by default the first of
</s>, <|endoftext|>, <｜end▁of▁sentence｜> the tokenizer has). It has no Traditional→Simplified
conversion, width folding, Chinese quality filters or packing into training rows; those are left
out, which favours the peer.
"""

from __future__ import annotations

import argparse
from pathlib import Path

EOS_CANDIDATES = ("</s>", "<|endoftext|>", "<｜end▁of▁sentence｜>")


def eos_token_of(tokenizer_json: str) -> str:
    """The first of EOS_CANDIDATES the tokenizer knows (datatrove needs one that exists)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_json)
    for candidate in EOS_CANDIDATES:
        if tok.token_to_id(candidate) is not None:
            return candidate
    raise SystemExit(f"{tokenizer_json}: none of {EOS_CANDIDATES} is a token; give --eos-token")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input_dir")
    ap.add_argument("work_dir")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--language", default="zh")
    ap.add_argument("--eos-token", default=None)
    args = ap.parse_args()
    eos = args.eos_token or eos_token_of(args.tokenizer)

    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
    )
    from datatrove.pipeline.filters import GopherRepetitionFilter
    from datatrove.pipeline.formatters import FTFYFormatter, PIIFormatter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    work = Path(args.work_dir)
    tasks = len(list(Path(args.input_dir).glob("*.jsonl")))
    config = MinhashConfig(hash_config=HashConfig(precision=64), num_buckets=16, hashes_per_bucket=8)

    def run(pipeline: list, name: str, n_tasks: int, workers: int | None = None) -> None:
        LocalPipelineExecutor(
            pipeline=pipeline,
            tasks=n_tasks,
            workers=workers or args.workers,
            logging_dir=str(work / "logs" / name),
            skip_completed=False,
        ).run()

    run(
        [
            JsonlReader(args.input_dir),
            FTFYFormatter(),
            PIIFormatter(),
            GopherRepetitionFilter(language=args.language),
            JsonlWriter(str(work / "clean")),
        ],
        "clean",
        tasks,
    )
    run(
        [
            JsonlReader(str(work / "clean")),
            MinhashDedupSignature(output_folder=str(work / "sigs"), config=config, language=args.language),
        ],
        "sigs",
        tasks,
    )
    run(
        [
            MinhashDedupBuckets(
                input_folder=str(work / "sigs"), output_folder=str(work / "buckets"), config=config
            )
        ],
        "buckets",
        config.num_buckets,
    )
    run(
        [
            MinhashDedupCluster(
                input_folder=str(work / "buckets"), output_folder=str(work / "remove_ids"), config=config
            )
        ],
        "cluster",
        1,
        1,
    )
    run(
        [
            JsonlReader(str(work / "clean")),
            MinhashDedupFilter(input_folder=str(work / "remove_ids")),
            DocumentTokenizer(
                output_folder=str(work / "tokens"),
                tokenizer_name_or_path=args.tokenizer,
                eos_token=eos,
                shuffle_documents=False,
            ),
        ],
        "tokenize",
        tasks,
    )


if __name__ == "__main__":
    main()
