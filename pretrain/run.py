"""Pretrain a LLaMA-family model on the packed shards of a dataprep output.

    python pretrain/run.py --config pretrain/configs/tiny.yaml --data out [--steps N] [--resume auto|PATH]
    python pretrain/run.py --config ... --data out --overfit-check
    python pretrain/run.py --config ... --show-layout 8 --tp 2 --pp 2
    msrun --worker_num=2 --local_worker_num=2 --master_port=8118 --join=True \\
        pretrain/run.py --config ... --data out            (data parallel: parallel.data_parallel: 2)

Outputs in --output (default output/<config name>): metrics.jsonl (one record per step: loss, lr,
grad_norm, spikes, tokens_per_s, total_tokens_per_s, model_flops_per_s, mfu, data_wait_share and
alarm, memory, loss_scale, skipped; eval records), loss.png, config.resolved.json,
checkpoints/rank_<r>/step_<N>/, run.json (the run's record: docs/mixing.md). Several outputs
blended by weight: the config's ``data: [{path, weight}, ...]`` instead of --data. An --output
holding an earlier run is refused unless --resume or --overwrite. SIGTERM stops after the current
step with a checkpoint (exit 0). Exit codes: 0 done or stopped by SIGTERM, 1 training failed
(non-finite loss, gradient spike under policy stop, bad checkpoint, failed overfit check), 2
config/data error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pretrain.config import ConfigError, load_config
from pretrain.data import Layout


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--config", help="training config YAML (see pretrain/configs/)")
    ap.add_argument("--data", help="output directory of `dataprep prepare` (holds manifest.json)")
    ap.add_argument("--output", help="where metrics, plot and checkpoints go (default output/<config name>)")
    ap.add_argument(
        "--steps",
        type=int,
        help="stop after this step (checkpointed; the LR schedule still spans train.steps)",
    )
    ap.add_argument(
        "--resume",
        help="'auto' (the newest step complete on every rank, else start fresh) or a checkpoint path",
    )
    ap.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in an --output that holds an earlier run (deletes its checkpoints and metrics)",
    )
    ap.add_argument(
        "--allow-config-mismatch",
        default="",
        metavar="FIELD[,FIELD]",
        help="with model.init_from a Hugging Face checkpoint: train with the config's value of these "
        "fields although config.json differs (rope_theta, rms_norm_eps, hidden_act, tie_word_embeddings, "
        "max_position_embeddings, qkv_bias)",
    )
    ap.add_argument(
        "--no-verify-shards",
        action="store_true",
        help="do not hash the shard files against manifest.json before reading them (train.verify_shards: "
        "false; sizes and token ids are still checked)",
    )
    ap.add_argument(
        "--overfit-check",
        action="store_true",
        help="train on a tiny fixed slice and assert the loss falls below overfit.max_loss",
    )
    ap.add_argument(
        "--show-layout",
        type=int,
        metavar="WORLD",
        help="print the rank layout (pp_stage, dp_rank, tp_rank, dataset shard) for WORLD ranks and exit",
    )
    ap.add_argument(
        "--tp", type=int, help="with --show-layout: tensor-parallel size (default: from the config)"
    )
    ap.add_argument("--pp", type=int, help="with --show-layout: pipeline stages (default: from the config)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compare"]:
        from pretrain.record import compare_command

        return compare_command(argv[1:])
    args = parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.show_layout:
        from pretrain.context import layout_table

        try:
            layout = Layout(
                args.show_layout,
                args.tp or cfg.parallel.tensor_parallel,
                args.pp or cfg.parallel.pipeline_stages,
            )
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(layout_table(layout))
        return 0
    if args.overwrite and args.resume:
        print("error: --overwrite starts over, --resume continues: give one of them", file=sys.stderr)
        return 2
    if bool(args.data) == bool(cfg.data):
        print(
            "error: give the data either with --data OUT (the output directory of `dataprep prepare`) or "
            "as the config's data: [{path, weight}, ...], not both"
            if args.data
            else "error: --data OUT is required (the output directory of `dataprep prepare`), or the "
            "config's data: [{path, weight}, ...]",
            file=sys.stderr,
        )
        return 2
    if args.no_verify_shards:
        cfg.train.verify_shards = False
    output = Path(args.output or Path("output") / Path(args.config or "default").stem)
    if os.environ.get("MS_ROLE") == "MS_SCHED":  # msrun's scheduler process runs this script too
        from mindspore.communication import init

        init()  # serves the cluster until the workers are done
        return 0

    from pretrain.trainer import Trainer, main_guard

    def go() -> int:
        allowed = [f.strip() for f in args.allow_config_mismatch.split(",") if f.strip()]
        trainer = Trainer(cfg, args.data, output, allow_config_mismatch=allowed)
        if args.overfit_check:
            passed, first, last = trainer.overfit_check()
            bound = cfg.overfit.max_loss
            verdict = "PASSED" if passed else "FAILED"
            print(f"overfit check {verdict}: loss {first:.4f} -> {last:.4f} (bound {bound})", flush=True)
            if not passed:
                print(
                    "error: the model cannot memorise a tiny slice; fix the model/optimizer/data before a "
                    "long run (check lr, labels shift, loss mask, and that the data is not all padding)",
                    file=sys.stderr,
                )
            return 0 if passed else 1
        trainer.fit(args.resume, stop_at=args.steps, overwrite=args.overwrite)
        return 0

    return main_guard(go)


if __name__ == "__main__":
    sys.exit(main())
