"""Command line: ``dataprep prepare | stages | report | inspect | verify | train-tokenizer |
train-quality``.

Imports stay inside the command functions so ``dataprep --help`` starts instantly (MindSpore is
never imported on the prepare path). Exit codes: 0 success, 1 the run failed, 2 usage error
(bad arguments, missing input, invalid recipe).
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

EXIT_FAILED = 1
EXIT_USAGE = 2


def _cmd_prepare(args: argparse.Namespace) -> int:
    from dataprep.docstore import WorkMismatch
    from dataprep.executor import RunError, UsageError, prepare
    from dataprep.formats.mindrecord_shards import only_files_here
    from dataprep.inputs import InputNotFound
    from dataprep.recipe import load_recipe
    from dataprep.stage.params import RecipeError
    from dataprep.stage.reader import InputError

    only_files_here()  # this process exits after the run: MindRecord's writer alone will do
    try:
        recipe = load_recipe(args.recipe, seed=args.seed)
        prepare(
            args.inputs,
            args.out,
            recipe,
            workers=args.workers,
            keep_work=args.keep_work,
            quiet=args.quiet,
            executor=args.executor,
            ray_address=args.ray_address,
            overwrite=args.overwrite,
            resume_only=args.resume_only,
        )
    except (RecipeError, InputNotFound, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (InputError, RunError, WorkMismatch) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:  # e.g. a full disk, a lost mount: the run stopped where it was
        print(f"error: {e}", file=sys.stderr)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            print(
                "the file system is full: free space where OUT is (deduplication keeps about 3x the "
                "corpus text there while it runs; docs/scaling-out-on-ray.md, 'Memory per phase'), then",
                file=sys.stderr,
            )
        if (Path(args.out) / "work" / "run.json").is_file():  # a run started there: it can resume
            print("rerun the same command to resume: finished tasks are kept", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _cmd_stages(args: argparse.Namespace) -> int:
    import dataclasses

    from dataprep.formats.registry import all_formats
    from dataprep.recipe import InputParams
    from dataprep.stage.params import param_fields, type_name
    from dataprep.stage.registry import all_stages

    def show_params(cls: type, skip: set[str]) -> None:
        for name, tp, default, help_text in param_fields(cls):
            if name in skip:
                continue
            shown = "(required)" if default is dataclasses.MISSING else repr(default)
            print(f"      {name}: {type_name(tp)} = {shown}")
            if help_text:
                print(f"          {help_text}")

    common = {f.name for f in dataclasses.fields(InputParams)}
    print("input options (recipe 'input:' section, all readers):")
    show_params(InputParams, set())
    kinds = ("reader", "map", "global")
    for kind in kinds:
        items = [c for c in all_stages().values() if c.kind == kind]
        if not items:
            continue
        print(f"\n{kind} stages:")
        for cls in items:
            doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
            extra = ""
            if kind == "reader":
                extra = f" [{' '.join(cls.extensions)}]"
            print(f"  {cls.name}{extra}: {doc}")
            if getattr(cls, "requires", ()) or getattr(cls, "uses", ()) or getattr(cls, "provides", ()):
                print(
                    f"      requires: {', '.join(cls.requires) or '-'}; "
                    + (f"uses: {', '.join(cls.uses)}; " if cls.uses else "")
                    + f"provides: {', '.join(cls.provides) or '-'}"
                )
            show_params(cls.Params, common if kind == "reader" else set())
    print("\nshard formats (pack.writers):")
    for fmt in all_formats():
        doc = (fmt.writer.__doc__ or "").strip().splitlines()[0] if fmt.writer.__doc__ else ""
        print(f"  {fmt.name}: {doc}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dataprep.report import write_report

    out = Path(args.out)
    if not (out / "stats.json").exists():
        print(
            f"error: {out} has no stats.json (run `dataprep prepare ... --out {out}` first)", file=sys.stderr
        )
        return EXIT_USAGE
    print(write_report(out))
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from dataprep.formats.inspect import inspect_shard

    try:
        return inspect_shard(
            args.path,
            rows=args.rows,
            row=args.row,
            as_json=args.json,
            split=args.split,
            fmt=args.format,
            tokenizer=args.tokenizer,
        )
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


def _cmd_verify(args: argparse.Namespace) -> int:
    from dataprep.formats.verify import verify_command

    return verify_command(args.out, quiet=args.quiet)


def _cmd_train_tokenizer(args: argparse.Namespace) -> int:
    from dataprep.tokenizers.corpus import train_tokenizer_command

    try:
        return train_tokenizer_command(
            args.inputs, args.out, kind=args.kind, vocab_size=args.vocab_size, sample_bytes=args.sample_bytes
        )
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


def _cmd_train_quality(args: argparse.Namespace) -> int:
    from dataprep.stage import registry

    # The quality_classifier stage brings its own training command (found through the registry:
    # the framework imports no concrete stage).
    train = registry.get("quality_classifier").train_command
    try:
        return train(
            args.positive,
            args.negative,
            args.out,
            lang=args.lang,
            heldout_fraction=args.heldout_fraction,
            valid_positive=args.valid_positive or (),
            valid_negative=args.valid_negative or (),
            options={
                "epoch": args.epoch,
                "dim": args.dim,
                "word_ngrams": args.word_ngrams,
                "seed": args.seed,
                "bucket": args.bucket,
                "cutoff": args.cutoff,
            },
        )
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


class _ExecutorNames:
    """``--executor``'s choices: the registered executors (:mod:`dataprep.executors`), read when
    argparse first needs them (an --executor given, ``prepare --help``), so that other commands
    and a run on the default executor do not pay for reading the entry points."""

    def _names(self) -> list[str]:
        from dataprep.executors import executor_names

        return executor_names()

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="dataprep",
        description="Offline data preparation for LLM pretraining: clean, deduplicate, tokenize and pack "
        "text corpora into MindRecord and int32 shards.",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("prepare", help="run a recipe over input files into an output directory")
    p.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUT",
        help="files, directories or globs (.jsonl .txt .parquet, optionally .gz/.zst); none when the "
        "recipe lists its inputs under 'sources:'",
    )
    p.add_argument("--out", required=True, help="output directory (created; reruns resume)")
    p.add_argument("--recipe", default="default", help="recipe YAML file or built-in name (default: default)")
    p.add_argument(
        "--workers",
        type=workers_arg,
        default=None,
        help="worker processes, at least 1, or 'auto' for all cores (default: auto)",
    )
    p.add_argument("--seed", type=int, default=None, help="override the recipe's seed")
    p.add_argument(
        "--executor",
        choices=_ExecutorNames(),
        default="local",
        help="where the work runs: local, a process pool (default); ray, a Ray cluster "
        "(pip install 'dataprep[ray]'); or a plug-in's executor",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="an existing Ray cluster (default: start a local instance with --workers CPUs); "
        "OUT must be on a file system every node sees",
    )
    p.add_argument(
        "--keep-work", action="store_true", help="keep every pass's intermediate documents in OUT/work"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="when the recipe or inputs changed since the run in OUT, start over, deleting what it wrote",
    )
    p.add_argument(
        "--resume-only", action="store_true", help="resume the run in OUT or fail; never start over"
    )
    p.set_defaults(func=_cmd_prepare)

    p = sub.add_parser("stages", help="list registered stages and their parameters")
    p.set_defaults(func=_cmd_stages)

    p = sub.add_parser("report", help="regenerate OUT/report.html from OUT/stats.json")
    p.add_argument("out", metavar="OUT")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("inspect", help="look inside outputs")
    isub = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    q = isub.add_parser("shard", help="decode rows of a shard with document boundaries visible")
    q.add_argument("path", metavar="PATH", help="a shard file, or an output directory")
    q.add_argument(
        "--rows", type=int, default=3, help="how many rows (a megatron file: sequences) to show (default 3)"
    )
    q.add_argument(
        "--row", type=int, default=None, help="show only this row (a megatron file: this sequence)"
    )
    q.add_argument("--json", action="store_true", help="machine-readable output")
    q.add_argument("--split", default="train", help="split, when PATH is an output directory (default train)")
    q.add_argument("--format", default=None, help="shard format (bin, mindrecord, ...), for a directory")
    q.add_argument("--tokenizer", default=None, help="tokenizer to decode with (default: the run's)")
    q.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("verify", help="check a run's shards against its manifest (exit 1 on any mismatch)")
    p.add_argument("out", metavar="OUT", help="output directory of a run")
    p.add_argument("--quiet", action="store_true", help="print only problems and the verdict")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("train-tokenizer", help="train a tokenizer on a deterministic sample of text")
    p.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="input files/directories, or output directories of runs"
    )
    p.add_argument("--out", required=True, help="directory for tokenizer.json / tokenizer.model")
    p.add_argument("--kind", choices=["bytebpe", "bpe", "unigram"], default="bytebpe")
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument(
        "--sample-bytes", type=int, default=64 << 20, help="UTF-8 bytes of text to train on (default 64 MiB)"
    )
    p.set_defaults(func=_cmd_train_tokenizer)

    p = sub.add_parser(
        "train-quality",
        help="train a fastText quality classifier (positives vs negatives) for the quality_classifier stage",
    )
    p.add_argument(
        "--positive", nargs="+", required=True, metavar="FILE", help="documents of the quality to keep"
    )
    p.add_argument("--negative", nargs="+", required=True, metavar="FILE", help="documents to score low")
    p.add_argument(
        "--out",
        required=True,
        help="model file: .npz (scored in numpy; .bin / .ftz: fastText's formats); the card goes next to it",
    )
    p.add_argument("--lang", default="zh", help="language of the data, recorded in the card (default zh)")
    p.add_argument(
        "--heldout-fraction",
        type=float,
        default=0.2,
        help="share held out by a hash of the text for the figures (default 0.2)",
    )
    p.add_argument(
        "--valid-positive", nargs="+", metavar="FILE", help="held-out positives (instead of a hash split)"
    )
    p.add_argument("--valid-negative", nargs="+", metavar="FILE", help="held-out negatives")
    p.add_argument("--epoch", type=int, default=10)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--word-ngrams", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bucket", type=int, default=1 << 19, help="hash buckets of the word bigrams")
    p.add_argument(
        "--cutoff", type=int, default=100_000, help="words and bigrams kept in a quantized .ftz (its size)"
    )
    p.set_defaults(func=_cmd_train_quality)
    return ap


def workers_arg(value: str) -> int | None:
    """``--workers``: an integer of at least 1, or 'auto' (None: all cores)."""
    if value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, or 'auto' (got {value!r})")
    return n


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
