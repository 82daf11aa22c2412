"""Training data path: rank layout, per-rank sharding (bin and MindRecord), global batches that do
not depend on the layout, row features, loader resumption, config/manifest checks. No model is
trained here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dataprep.formats.bin_shards import BinRows
from dataprep.formats.readers_for_training import ShardError, open_split
from pretrain.config import ConfigError, load_config, resolve_against_manifest, trajectory_hash
from pretrain.data import Layout, RowSource, StepLoader, row_features, segments_from_ends
from pretrain.synthetic_data import make_rows, write_dataset

LAYOUTS = [(8, 2, 2), (8, 1, 1), (8, 8, 1), (8, 2, 4), (6, 3, 1)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 48 rows: divisible by every dp of LAYOUTS (4, 8, 1, 1, 2), so shards can be exactly disjoint
    return write_dataset(
        tmp_path_factory.mktemp("data"),
        rows=48,
        seq_length=16,
        vocab_size=64,
        formats=("bin", "mindrecord"),
        validation_rows=8,
        files=2,
    )


@pytest.fixture(scope="module")
def uneven(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(
        tmp_path_factory.mktemp("uneven"),
        rows=45,
        seq_length=16,
        vocab_size=64,
        formats=("bin", "mindrecord"),
    )


def row_key(row: np.ndarray) -> bytes:
    return np.asarray(row, dtype=np.int32).tobytes()


def test_layout_rank_formula_round_trips() -> None:
    for world, tp, pp in LAYOUTS:
        lay = Layout(world, tp, pp)
        assert lay.dp * tp * pp == world
        seen = set()
        for rank in range(world):
            pp_stage, dp_rank, tp_rank = lay.coords(rank)
            assert rank == pp_stage * (lay.dp * tp) + dp_rank * tp + tp_rank
            assert lay.rank_of(pp_stage, dp_rank, tp_rank) == rank
            seen.add((pp_stage, dp_rank, tp_rank))
        assert len(seen) == world
    with pytest.raises(ValueError, match="not divisible"):
        Layout(6, 4, 1)


def epoch_rows(data: Path, fmt: str, lay: Layout, rank: int, epoch: int) -> list[bytes]:
    """The rows one rank reads in one epoch with batch 1, in order (a simulated rank of the layout)."""
    _, dp_rank, _ = lay.coords(rank)
    src = RowSource(open_split(data, "train", fmt), lay.dp, dp_rank, seed=11, shuffle=True)
    steps = src.steps_per_epoch(lay.dp)
    return [row_key(b["input_ids"][0]) for b in src.step_batches(epoch, 0, steps, lay.dp, 1)]


@pytest.mark.parametrize("fmt", ["bin", "mindrecord"])
def test_every_rank_of_every_layout(dataset: Path, fmt: str) -> None:
    """Replicas (same dp_rank) read identical rows; dp ranks are disjoint; together they cover all rows."""
    all_rows = {
        row_key(r) for r in BinRows(open_split(dataset, "train", "bin")).read(np.arange(48))["input_ids"]
    }
    assert len(all_rows) == 48
    for world, tp, pp in LAYOUTS:
        lay = Layout(world, tp, pp)
        by_dp: dict[int, list[bytes]] = {}
        for rank in range(world):
            rows = epoch_rows(dataset, fmt, lay, rank, epoch=0)
            _, dp_rank, _ = lay.coords(rank)
            if dp_rank in by_dp:
                assert rows == by_dp[dp_rank], (
                    f"{fmt} layout {(world, tp, pp)}: rank {rank} differs from its replica"
                )
            else:
                by_dp[dp_rank] = rows
        assert len(by_dp) == lay.dp
        union: list[bytes] = [r for rows in by_dp.values() for r in rows]
        assert len(union) == len(set(union)) == 48, (
            f"{fmt} layout {(world, tp, pp)}: shards overlap or miss rows"
        )
        assert set(union) == all_rows


@pytest.mark.parametrize("fmt", ["bin", "mindrecord"])
def test_uneven_split_leaves_the_remainder_out_of_each_epoch(uneven: Path, fmt: str) -> None:
    """45 rows over 8 ranks: 5 whole global batches of 8; the 5 rows left over differ per epoch."""
    lay = Layout(8, 1, 1)
    left_out = []
    for epoch in (0, 1):
        per_rank = [epoch_rows(uneven, fmt, lay, r, epoch) for r in range(8)]
        assert all(len(rows) == 5 for rows in per_rank)
        read = [r for rows in per_rank for r in rows]
        assert len(read) == len(set(read)) == 40  # no row twice within an epoch
        left_out.append(set(read))
    assert left_out[0] != left_out[1]


def global_step_rows(data: Path, fmt: str, dp: int, batch: int, accum: int, steps: int) -> list[list[int]]:
    """Row ids of each step's global batch, over all dp ranks (sorted), for one layout."""
    out: list[list[int]] = [[] for _ in range(steps)]
    for dp_rank in range(dp):
        src = RowSource(open_split(data, "train", fmt), dp, dp_rank, seed=5, shuffle=True)
        loader = StepLoader(src, batch, accum, eos_id=2, pad_id=0, start_step=0, end_step=steps)
        try:
            for step, micro in loader:
                assert len(micro) == accum and all(len(f["row_ids"]) == batch for f in micro)
                out[step] += [int(i) for f in micro for i in f["row_ids"]]
        finally:
            loader.close()
    return [sorted(ids) for ids in out]


def test_the_global_batch_not_the_layout_decides_the_rows_of_a_step(dataset: Path) -> None:
    """dp x batch x accumulation = 4 in five layouts, both formats: the same rows at every step (this
    is what lets a run resume under another data-parallel size), crossing an epoch (48 rows = 12 steps)."""
    reference = global_step_rows(dataset, "bin", 1, 4, 1, 14)
    assert all(len(ids) == 4 for ids in reference)
    assert len({i for ids in reference[:12] for i in ids}) == 48
    assert reference[12] != reference[0]  # epoch 1 is another permutation
    for fmt in ("bin", "mindrecord"):
        for dp, batch, accum in ((2, 2, 1), (4, 1, 1), (1, 2, 2), (2, 1, 2)):
            assert global_step_rows(dataset, fmt, dp, batch, accum, 14) == reference, (fmt, dp, batch, accum)
    # and the two formats hold the same rows at those indices
    ids = np.array(reference[3])
    bin_rows = next(RowSource(open_split(dataset, "train", "bin"), 1, 0, 5, True).read(ids, 4))
    mr_rows = next(RowSource(open_split(dataset, "train", "mindrecord"), 1, 0, 5, True).read(ids, 4))
    assert np.array_equal(bin_rows["input_ids"], mr_rows["input_ids"])


@pytest.mark.parametrize("fmt", ["bin", "mindrecord"])
def test_epochs_reshuffle_deterministically(dataset: Path, fmt: str) -> None:
    lay = Layout(2, 1, 1)
    e0, e0_again, e1 = (epoch_rows(dataset, fmt, lay, 0, e) for e in (0, 0, 1))
    assert e0 == e0_again
    assert e0 != e1


@pytest.mark.parametrize("fmt", ["bin", "mindrecord"])
def test_loader_resumes_at_any_step_with_identical_batches(dataset: Path, fmt: str) -> None:
    """Step t's micro-batches do not depend on where the loader started (basis of exact resume)."""
    src = RowSource(open_split(dataset, "train", fmt), 2, 1, seed=5, shuffle=True)

    def steps(start: int, end: int) -> list[list[bytes]]:
        loader = StepLoader(src, batch_size=2, accum=2, eos_id=2, pad_id=0, start_step=start, end_step=end)
        try:
            return [
                [row_key(r) for f in micro for r in np.c_[f["input_ids"], f["labels"][:, -1:]]]
                for _, micro in loader
            ]
        finally:
            loader.close()

    straight = steps(0, 14)  # 24 rows per rank / 4 per step = 6 steps per epoch: crosses 2 epochs
    assert steps(9, 14) == straight[9:]
    assert steps(6, 7) == straight[6:7]


def test_features_from_stored_boundaries_equal_eos_derived() -> None:
    rows, asl = make_rows(20, seq_length=24, vocab_size=50, seed=3)
    stored = row_features(rows, asl, None, eos_id=2, pad_id=0)
    derived = row_features(rows, None, None, eos_id=2, pad_id=0)
    for k in stored:
        assert np.array_equal(stored[k], derived[k]), k
    # the final row is padded: its labels past the real tokens are masked
    real = int(asl[-1][-1])
    assert stored["loss_mask"][-1].sum() == real - 1
    assert (rows[-1][real:] == 0).all()


def test_features_positions_restart_at_document_starts() -> None:
    row = np.array([[5, 6, 2, 7, 8, 9, 2, 4, 0, 0]], dtype=np.int32)  # docs "5 6 EOS", "7 8 9 EOS", "4", pad
    f = row_features(row, [np.array([3, 7, 8])], None, eos_id=2, pad_id=0)
    assert f["position_ids"][0].tolist() == [0, 1, 2, 0, 1, 2, 3, 0, 0]
    assert f["segment_ids"][0].tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 3]
    assert f["labels"][0].tolist() == [6, 2, 7, 8, 9, 2, 4, 0, 0]
    assert f["loss_mask"][0].tolist() == [1, 1, 1, 1, 1, 1, 1, 0, 0]
    seg, pos = segments_from_ends(np.array([3, 7, 8]), 9)
    assert (
        seg[0].tolist() == f["segment_ids"][0].tolist() and pos[0].tolist() == f["position_ids"][0].tolist()
    )


def megatron_eod_mask_loss(inputs: np.ndarray, eod: int) -> np.ndarray:
    """Megatron-LM's --eod-mask-loss (get_ltor_masks_and_position_ids): loss_mask[tokens == eod] = 0,
    tokens = the input ids (labels are the inputs shifted by one)."""
    return (inputs != eod).astype(np.float32)


def test_mask_cross_document_label_on_a_packed_row() -> None:
    """Docs "5 6 EOS", "7 8 9 EOS", "4 EOS" then "3" running into the next row: the labels after each
    EOS (7, 4 and 3: a new document's first token) leave the loss, the EOS labels stay; the same from
    stored boundaries and from EOS positions, and equal to Megatron's eod_mask_loss there."""
    row = np.array([[5, 6, 2, 7, 8, 9, 2, 4, 2, 3]], dtype=np.int32)
    asl = [np.array([3, 7, 9, 10])]
    off = row_features(row, asl, None, eos_id=2, pad_id=0)
    assert off["labels"][0].tolist() == [6, 2, 7, 8, 9, 2, 4, 2, 3]
    assert off["loss_mask"][0].tolist() == [1] * 9  # default (as Megatron): everything counts
    want = [1, 1, 0, 1, 1, 1, 0, 1, 0]
    for boundaries in (asl, None):
        on = row_features(row, boundaries, None, eos_id=2, pad_id=0, mask_cross_document_label=True)
        assert on["loss_mask"][0].tolist() == want, boundaries
        for k in ("input_ids", "labels", "position_ids", "segment_ids"):
            assert np.array_equal(on[k], off[k])
    assert megatron_eod_mask_loss(off["input_ids"][0], 2).tolist() == want
    # with padding and a stored loss mask, the option only removes labels
    padded = np.array([[5, 2, 7, 8, 2, 0, 0]], dtype=np.int32)
    stored = np.array([[1, 1, 1, 1, 1, 0, 0]], dtype=np.int32)
    on = row_features(padded, [np.array([2, 5])], stored, 2, 0, mask_cross_document_label=True)
    assert on["loss_mask"][0].tolist() == [1, 0, 1, 1, 0, 0]
    from pretrain.config import load_config

    assert load_config(None).train.mask_cross_document_label is False


def test_features_pad_equal_to_eos_keeps_the_real_eos() -> None:
    row = np.array([[5, 6, 2, 7, 2, 2, 2, 2]], dtype=np.int32)  # pad_id == eos_id == 2
    f = row_features(row, None, None, eos_id=2, pad_id=2)
    # labels: 6 2 7 2 | 2 2 2 -> the EOS after "7" counts, the padding after it does not
    assert f["loss_mask"][0].tolist() == [1, 1, 1, 1, 0, 0, 0]


def test_stored_loss_mask_is_used() -> None:
    row = np.array([[5, 6, 7, 8, 9]], dtype=np.int32)
    mask = np.array([[1, 0, 1, 1, 0]], dtype=np.int32)  # per row token: does it count as a label
    f = row_features(row, None, mask, eos_id=2, pad_id=0)
    assert f["loss_mask"][0].tolist() == [0, 1, 1, 0]
    aligned = row_features(row, None, mask[:, 1:], eos_id=2, pad_id=0)  # already label-aligned
    assert aligned["loss_mask"][0].tolist() == [0, 1, 1, 0]


def test_bin_rows_without_side_files_have_no_boundary_column(tmp_path: Path) -> None:
    data = write_dataset(tmp_path, rows=8, seq_length=8, vocab_size=32, boundaries=False)
    rows = BinRows(open_split(data, "train", "bin"))
    assert rows.columns == ("input_ids",)
    assert rows.read([0, 3])["actual_seq_len"] is None


def test_truncated_bin_file_is_reported(tmp_path: Path) -> None:
    data = write_dataset(tmp_path, rows=8, seq_length=8, vocab_size=32)
    path = data / "shards" / "bin" / "train-00000.bin"
    path.write_bytes(path.read_bytes()[: 9 * 4 * 7])  # 7 whole rows left of 8
    with pytest.raises(ShardError, match="manifest lists 8"):
        BinRows(open_split(data, "train", "bin"))


def test_missing_split_and_format_errors(dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(ShardError, match="no split 'test'"):
        open_split(dataset, "test")
    only_bin = write_dataset(tmp_path, rows=8, seq_length=8, vocab_size=32)
    with pytest.raises(ShardError, match="no 'mindrecord' files"):
        open_split(only_bin, "train", "mindrecord")
    assert open_split(dataset, "train", "auto").format == "mindrecord"


def test_config_mismatch_with_manifest_is_a_clear_error(dataset: Path) -> None:
    shards = json.loads((dataset / "manifest.json").read_text())["shards"]
    cfg = load_config(None, {"model": {"seq_length": 32}})
    with pytest.raises(
        ConfigError, match=r"model.seq_length = 32 but the data was prepared with seq_length = 16"
    ):
        resolve_against_manifest(cfg, shards)
    cfg = load_config(None, {"model": {"vocab_size": 128}})
    with pytest.raises(ConfigError, match=r"model.vocab_size = 128 .* vocab_size = 64"):
        resolve_against_manifest(cfg, shards)
    cfg = load_config(None)
    resolve_against_manifest(cfg, shards)
    assert (cfg.model.seq_length, cfg.model.vocab_size) == (16, 64)


def test_every_config_field_has_a_docstring_and_the_sections_are_the_yaml_keys() -> None:
    """Each field of each section dataclass carries a docstring under it (unit, meaning, default),
    and the nested dict the YAML is merged into is exactly the dataclasses' fields."""
    import ast
    import dataclasses
    import itertools

    from pretrain import config

    tree = ast.parse(Path(config.__file__).read_text(encoding="utf-8"))
    documented: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            body = node.body
            documented[node.name] = {
                a.target.id
                for a, b in itertools.pairwise(body)
                if isinstance(a, ast.AnnAssign)
                and isinstance(a.target, ast.Name)
                and isinstance(b, ast.Expr)
                and isinstance(b.value, ast.Constant)
                and isinstance(b.value.value, str)
            }
    sections = [config.TrainingConfig, *{cls for cls in config._SECTIONS.values()}]
    for cls in sections:
        names = {f.name for f in dataclasses.fields(cls)}
        nested = {f for (owner, f) in config._SECTIONS if owner is cls and f != "data"}
        assert names - nested <= documented[cls.__name__], (
            cls.__name__,
            names - nested - documented[cls.__name__],
        )
    assert set(config.DEFAULTS) == {f.name for f in dataclasses.fields(config.TrainingConfig)}
    assert config.DEFAULTS["train"]["loss_scale"]["window"] == 1000
    assert config.DEFAULTS["monitor"]["grad_norm_spike"]["policy"] == "warn"


def test_config_round_trips_through_its_dict(tmp_path: Path) -> None:
    """config.resolved.json is the merged YAML: values keep the YAML's types, keys their order."""
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  grad_clip: 1\ndata:\n  - {path: a, weight: 2}\n")
    cfg = load_config(p)
    d = cfg.to_dict()
    assert d["train"]["grad_clip"] == 1 and isinstance(d["train"]["grad_clip"], int)
    assert d["data"] == [{"path": "a", "weight": 2.0}] and cfg.data[0].weight == 2.0
    assert list(d) == [
        "seed",
        "data",
        "model",
        "train",
        "optimizer",
        "lr_schedule",
        "parallel",
        "checkpoint",
        "eval",
        "monitor",
        "overfit",
    ]
    assert type(cfg).from_dict(json.loads(json.dumps(d))) == cfg
    with pytest.raises(ConfigError, match=r"unknown config key 'monitor.grad_norm_spike.polcy'"):
        load_config(None, {"monitor": {"grad_norm_spike": {"polcy": "skip"}}})


def test_config_rejects_unknown_keys_and_bad_values(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  batchsize: 4\n")
    with pytest.raises(ConfigError, match=r"train\.batchsize"):
        load_config(p)
    with pytest.raises(ConfigError, match="amp_level"):
        load_config(None, {"train": {"amp_level": "O1"}})


def test_trajectory_hash_ignores_logging_but_not_batch_or_schedule_length() -> None:
    a = load_config(None)
    b = load_config(
        None, {"train": {"log_interval": 7}, "eval": {"interval": 7}, "checkpoint": {"keep_last": 9}}
    )
    assert trajectory_hash(a, "d") == trajectory_hash(b, "d")
    for over in ({"train": {"batch_size": 8}}, {"train": {"steps": 999}}, {"lr_schedule": {"min_lr": 0.0}}):
        assert trajectory_hash(a, "d") != trajectory_hash(load_config(None, over), "d"), over
    assert trajectory_hash(a, "d") != trajectory_hash(a, "other data")


@pytest.mark.parametrize(
    "path", sorted(Path(__file__).resolve().parent.parent.glob("pretrain/configs/*.yaml"))
)
def test_shipped_configs_are_valid(path: Path) -> None:
    cfg = load_config(path)
    p = cfg.parallel
    Layout(
        p.data_parallel * p.tensor_parallel * p.pipeline_stages,
        p.tensor_parallel,
        p.pipeline_stages,
    )
