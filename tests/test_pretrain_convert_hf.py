"""Hugging Face → MindSpore conversion: a tiny LLaMA checkpoint written here with numpy +
safetensors, converted, loaded into the MindSpore model, and checked against a numpy reference
forward pass that follows the Hugging Face LLaMA definition."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from pretrain.convert_hf import ConversionError, convert, main
from pretrain.model import ModelConfig

HF_CONFIG = {
    "model_type": "llama",
    "vocab_size": 40,
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}


def hf_weights(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, ff, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * d

    def w(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.2, size=shape).astype(np.float32)

    out = {"model.embed_tokens.weight": w(v, h), "model.norm.weight": 1 + w(h), "lm_head.weight": w(v, h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": 1 + w(h),
            p + "post_attention_layernorm.weight": 1 + w(h),
            p + "self_attn.q_proj.weight": w(h, h),
            p + "self_attn.k_proj.weight": w(kv, h),
            p + "self_attn.v_proj.weight": w(kv, h),
            p + "self_attn.o_proj.weight": w(h, h),
            p + "mlp.gate_proj.weight": w(ff, h),
            p + "mlp.up_proj.weight": w(ff, h),
            p + "mlp.down_proj.weight": w(h, ff),
        }
    return out


def write_hf(path: Path, weights: dict[str, np.ndarray], cfg: dict = HF_CONFIG, bf16: bool = False) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    if bf16:  # numpy cannot hold bfloat16: write the (simple, documented) file layout directly
        header, blobs, offset = {}, [], 0
        for n, a in weights.items():
            top = (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
            header[n] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [offset, offset + len(top)]}
            blobs.append(top)
            offset += len(top)
        head = json.dumps(header).encode()
        head += b" " * (-len(head) % 8)
        (path / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    else:
        save_file(weights, str(path / "model.safetensors"))
    return path


def reference_logits(wts: dict[str, np.ndarray], cfg: dict, ids: np.ndarray) -> np.ndarray:
    """numpy forward of HF LlamaForCausalLM for one sequence ids [S] -> logits [S, vocab] (float64)."""
    h, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d, eps, s = h // nh, cfg["rms_norm_eps"], len(ids)
    g = {k: v.astype(np.float64) for k, v in wts.items()}

    def rms(x: np.ndarray, wgt: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * wgt

    def rot(x: np.ndarray) -> np.ndarray:
        return np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], -1)

    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, d, 2) / d)
    ang = np.outer(np.arange(s), inv)
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    x = g["model.embed_tokens.weight"][ids]
    causal = np.tril(np.ones((s, s), bool))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        y = rms(x, g[p + "input_layernorm.weight"])
        q = (y @ g[p + "self_attn.q_proj.weight"].T).reshape(s, nh, d).transpose(1, 0, 2)
        k = (y @ g[p + "self_attn.k_proj.weight"].T).reshape(s, nkv, d).transpose(1, 0, 2)
        v = (y @ g[p + "self_attn.v_proj.weight"].T).reshape(s, nkv, d).transpose(1, 0, 2)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)
        att = np.where(causal, q @ k.transpose(0, 2, 1) / np.sqrt(d), -np.inf)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        x = x + (att @ v).transpose(1, 0, 2).reshape(s, h) @ g[p + "self_attn.o_proj.weight"].T
        y = rms(x, g[p + "post_attention_layernorm.weight"])
        gate = y @ g[p + "mlp.gate_proj.weight"].T
        x = (
            x
            + ((gate / (1 + np.exp(-gate))) * (y @ g[p + "mlp.up_proj.weight"].T))
            @ g[p + "mlp.down_proj.weight"].T
        )
    return rms(x, g["model.norm.weight"]) @ g["lm_head.weight"].T


def mindspore_logits(ckpt: Path, vocab: int, ids: np.ndarray, pos: np.ndarray, seg: np.ndarray) -> np.ndarray:
    import mindspore as ms

    from pretrain.model import LlamaForCausalLM

    ms.set_context(mode=ms.PYNATIVE_MODE)
    cfg = ModelConfig(
        vocab_size=vocab,
        seq_length=len(ids),
        hidden_size=16,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=24,
        rms_norm_eps=1e-6,
        document_attention=True,
    )
    net = LlamaForCausalLM(cfg, seed=99)  # random init, then overwritten by the checkpoint
    not_loaded, _ = ms.load_param_into_net(net, ms.load_checkpoint(str(ckpt)), strict_load=True)
    assert not not_loaded
    t = [ms.Tensor(a[None, :].astype(np.int32)) for a in (ids, pos, seg)]
    return net.logits(*t).asnumpy()[0]


def test_converted_checkpoint_reproduces_reference_logits(tmp_path: Path) -> None:
    wts = hf_weights(HF_CONFIG)
    hf = write_hf(tmp_path / "hf", wts)
    report = convert(hf, tmp_path / "model.ckpt", log=lambda m: None)
    assert report.complete and len(report.matched) == len(wts)
    ids = np.random.default_rng(1).integers(0, 40, 12)
    got = mindspore_logits(tmp_path / "model.ckpt", 40, ids, np.arange(12), np.zeros(12, int))
    np.testing.assert_allclose(got, reference_logits(wts, HF_CONFIG, ids), atol=2e-4, rtol=1e-4)


def test_document_attention_equals_separate_forward_passes(tmp_path: Path) -> None:
    """Two packed documents with reset positions and segment masking = each document on its own."""
    wts = hf_weights(HF_CONFIG, seed=5)
    convert(write_hf(tmp_path / "hf", wts), tmp_path / "m.ckpt", log=lambda m: None)
    a, b = np.array([5, 9, 13, 2]), np.array([7, 8, 21, 30, 11, 2, 6, 4])
    ids = np.concatenate([a, b])
    pos = np.concatenate([np.arange(4), np.arange(8)])
    seg = np.array([0] * 4 + [1] * 8)
    got = mindspore_logits(tmp_path / "m.ckpt", 40, ids, pos, seg)
    want = np.concatenate([reference_logits(wts, HF_CONFIG, a), reference_logits(wts, HF_CONFIG, b)])
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)


def test_bf16_checkpoint_is_widened_exactly(tmp_path: Path) -> None:
    wts = hf_weights(HF_CONFIG, seed=2)
    rounded = {n: ((a.view(np.uint32) >> 16) << 16).view(np.float32) for n, a in wts.items()}
    convert(write_hf(tmp_path / "hf", wts, bf16=True), tmp_path / "m.ckpt", log=lambda m: None)
    ids = np.arange(10) % 40
    got = mindspore_logits(tmp_path / "m.ckpt", 40, ids, np.arange(10), np.zeros(10, int))
    np.testing.assert_allclose(got, reference_logits(rounded, HF_CONFIG, ids), atol=2e-4, rtol=1e-4)


def test_vocabulary_extension_uses_the_mean_of_old_rows(tmp_path: Path) -> None:
    import mindspore as ms

    wts = hf_weights(HF_CONFIG, seed=3)
    report = convert(write_hf(tmp_path / "hf", wts), tmp_path / "m.ckpt", vocab_size=48, log=lambda m: None)
    assert sorted(report.extended) == ["lm_head.weight", "model.embed_tokens.weight"]
    params = ms.load_checkpoint(str(tmp_path / "m.ckpt"))
    for name in report.extended:
        table = params[name].asnumpy()
        assert table.shape == (48, 16)
        np.testing.assert_array_equal(table[:40], wts[name])
        np.testing.assert_allclose(table[40:], np.repeat(wts[name].mean(0, keepdims=True), 8, 0), rtol=1e-6)
    with pytest.raises(ConversionError, match="smaller than the checkpoint"):
        convert(tmp_path / "hf", tmp_path / "x.ckpt", vocab_size=32, log=lambda m: None)


def test_partial_match_is_refused_with_counts(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    wts = hf_weights(HF_CONFIG)
    del wts["model.layers.1.mlp.up_proj.weight"]
    wts["model.layers.0.self_attn.k_proj.weight"] = wts[
        "model.layers.0.self_attn.q_proj.weight"
    ]  # wrong shape
    wts["model.layers.0.extra.weight"] = np.zeros(3, np.float32)
    wts["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.zeros(2, np.float32)
    hf = write_hf(tmp_path / "hf", wts)
    assert main(["--hf", str(hf), "--out", str(tmp_path / "m.ckpt")]) == 1
    out = capsys.readouterr()
    assert "missing 1, unexpected 1, shape-mismatched 1, ignored buffers 1" in out.out
    assert "refusing a partial conversion" in out.err
    assert not (tmp_path / "m.ckpt").exists()
    assert main(["--hf", str(hf), "--out", str(tmp_path / "m.ckpt"), "--allow-partial"]) == 0
    assert (tmp_path / "m.ckpt").exists()


def test_training_config_mismatch_is_reported(tmp_path: Path) -> None:
    hf = write_hf(tmp_path / "hf", hf_weights(HF_CONFIG))
    with pytest.raises(ConversionError, match=r"hidden_size: config.json 16, training config 32"):
        convert(
            hf, tmp_path / "m.ckpt", training_model={"hidden_size": 32, "num_layers": 2}, log=lambda m: None
        )


def test_training_starts_from_the_converted_weights_and_refuses_a_partial_checkpoint(tmp_path: Path) -> None:
    import mindspore as ms

    from pretrain.config import ConfigError, load_config
    from pretrain.synthetic_data import write_dataset
    from pretrain.trainer import Trainer

    data = write_dataset(tmp_path / "data", rows=8, seq_length=16, vocab_size=64)
    wts = hf_weights(HF_CONFIG, seed=4)
    convert(write_hf(tmp_path / "hf", wts), tmp_path / "full.ckpt", vocab_size=64, log=lambda m: None)
    model = {
        "hidden_size": 16,
        "num_layers": 2,
        "num_heads": 4,
        "num_kv_heads": 2,
        "intermediate_size": 24,
        "rms_norm_eps": 1e-6,
        "init_from": str(tmp_path / "full.ckpt"),
    }
    cfg = load_config(None, {"model": model, "train": {"mode": "pynative", "batch_size": 2}})
    tr = Trainer(cfg, data, tmp_path / "run", log=lambda m: None)
    got = {p.name: p.asnumpy() for p in tr.params}
    np.testing.assert_array_equal(
        got["model.layers.1.mlp.down_proj.weight"], wts["model.layers.1.mlp.down_proj.weight"]
    )
    np.testing.assert_array_equal(got["model.embed_tokens.weight"][:40], wts["model.embed_tokens.weight"])

    del wts["model.layers.1.mlp.down_proj.weight"]
    convert(
        write_hf(tmp_path / "hf2", wts),
        tmp_path / "partial.ckpt",
        vocab_size=64,
        allow_partial=True,
        log=lambda m: None,
    )
    assert "model.layers.1.mlp.down_proj.weight" not in ms.load_checkpoint(str(tmp_path / "partial.ckpt"))
    cfg = load_config(
        None,
        {
            "model": {**model, "init_from": str(tmp_path / "partial.ckpt")},
            "train": {"mode": "pynative", "batch_size": 2},
        },
    )
    with pytest.raises(ConfigError, match=r"1 model parameters are not in the checkpoint .*down_proj"):
        Trainer(cfg, data, tmp_path / "run2", log=lambda m: None)


# ---------------------------------------------------------------- init_from checks against the shards
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0..3, as the synthetic shards' manifest has them
VOCAB = SPECIALS + [f"w{i}" for i in range(4, 64)]
MODEL = {
    "hidden_size": 16,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "intermediate_size": 24,
    "rms_norm_eps": 1e-6,
}
TOKENIZER_CONFIG = {"eos_token": "</s>", "bos_token": "<s>", "pad_token": "<pad>", "unk_token": "<unk>"}


def word_tokenizer(path: Path, tokens: list[str]) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Synthetic shards whose manifest names their tokenizer the way dataprep writes it."""
    from dataprep.io import file_sha256
    from pretrain.synthetic_data import write_dataset

    out = write_dataset(tmp_path_factory.mktemp("shards"), rows=8, seq_length=16, vocab_size=64)
    (out / "tokenizer").mkdir()
    tok = word_tokenizer(out / "tokenizer" / "tokenizer.json", VOCAB)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["tokenizer"] = {
        "file": "tokenizer/tokenizer.json",
        "kind": "hf",
        "sha256": file_sha256(tok),
        "size": 64,
        "vocab_size": 64,
        **{f"{role}_token": SPECIALS[i] for i, role in enumerate(("pad", "bos", "eos", "unk"))},
        **{f"{role}_id": i for i, role in enumerate(("pad", "bos", "eos", "unk"))},
    }
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def hf_checkpoint(
    path: Path, tokens: list[str] = VOCAB, tokenizer_config: dict | None = None, **over: Any
) -> Path:
    cfg = {**HF_CONFIG, "vocab_size": len(tokens), "max_position_embeddings": 64, **over}
    write_hf(path, hf_weights(cfg, seed=7), cfg)
    word_tokenizer(path / "tokenizer.json", tokens)
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config or TOKENIZER_CONFIG))
    return path


def trainer_from(
    shards: Path, init_from: Path, out: Path, allow: tuple = (), **model: Any
) -> tuple[Any, list[str]]:
    from pretrain.config import load_config
    from pretrain.trainer import Trainer

    cfg = load_config(
        None,
        {
            "model": {**MODEL, **model, "init_from": str(init_from)},
            "train": {"mode": "pynative", "batch_size": 2},
        },
    )
    lines: list[str] = []
    return Trainer(cfg, shards, out, log=lines.append, allow_config_mismatch=allow), lines


def run_main(
    tmp: Path, shards: Path, init_from: Path, capsys: pytest.CaptureFixture, *extra: str
) -> tuple[int, str]:
    import yaml

    from pretrain.run import main

    cfg = tmp / f"c{len(list(tmp.iterdir()))}.yaml"
    cfg.write_text(
        yaml.safe_dump({"model": {**MODEL, "init_from": str(init_from)}, "train": {"mode": "pynative"}})
    )
    code = main(["--config", str(cfg), "--data", str(shards), "--output", str(tmp / "o"), *extra])
    captured = capsys.readouterr()
    return code, captured.err.strip()


def test_init_from_a_hugging_face_directory_checks_its_tokenizer_and_loads(
    tmp_path: Path, shards: Path
) -> None:
    hf = hf_checkpoint(tmp_path / "hf")
    tr, lines = trainer_from(shards, hf, tmp_path / "o")
    assert tr.model_cfg.vocab_size == 64
    got = {p.name: p.asnumpy() for p in tr.params}
    want = hf_weights({**HF_CONFIG, "vocab_size": 64}, seed=7)
    assert all(np.array_equal(got[n], want[n]) for n in want)
    assert any("has the shards' vocabulary (64 ids)" in ln for ln in lines)
    assert any("special ids agree with the manifest (eos 2, bos 1, pad 0, unk 3)" in ln for ln in lines)


def test_numeric_config_fields_are_refused_in_one_line_unless_allowed(
    tmp_path: Path, shards: Path, capsys: pytest.CaptureFixture
) -> None:
    hf = hf_checkpoint(tmp_path / "hf", rope_theta=1.0e6, rms_norm_eps=1.0e-5, max_position_embeddings=8)
    code, err = run_main(tmp_path, shards, hf, capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert "rope_theta: config.json 1000000.0, training config 10000.0" in err
    assert "rms_norm_eps: config.json 1e-05, training config 1e-06" in err
    assert "max_position_embeddings: config.json 8 < training seq_length 16" in err
    assert "--allow-config-mismatch max_position_embeddings,rms_norm_eps,rope_theta" in err
    allowed = ("rope_theta", "rms_norm_eps", "max_position_embeddings")
    tr, lines = trainer_from(shards, hf, tmp_path / "o2", allow=allowed)
    assert sum("(allowed)" in ln for ln in lines) == 3
    assert tr.model_cfg.rope_theta == 10000.0  # the config's value, as asked
    # the converter compares the same fields against a training config (exit 2)
    cfg = tmp_path / "train.yaml"
    import yaml

    cfg.write_text(yaml.safe_dump({"model": MODEL}))
    assert main(["--hf", str(hf), "--out", str(tmp_path / "m.ckpt"), "--config", str(cfg)]) == 2
    assert "rope_theta: config.json 1000000.0" in capsys.readouterr().err
    other = hf_checkpoint(
        tmp_path / "hf2", hidden_act="gelu", tie_word_embeddings=True, rope_scaling={"factor": 2}
    )
    code, err = run_main(tmp_path, shards, other, capsys, "--allow-config-mismatch", "hidden_act")
    assert code == 2 and len(err.splitlines()) == 1
    assert (
        "rope_scaling" in err and "tie_word_embeddings: config.json True" in err and "hidden_act" not in err
    )


def test_a_different_tokenizer_beside_the_checkpoint_is_refused(
    tmp_path: Path, shards: Path, capsys: pytest.CaptureFixture
) -> None:
    swapped = [*VOCAB]
    swapped[5], swapped[6] = swapped[6], swapped[5]
    code, err = run_main(tmp_path, shards, hf_checkpoint(tmp_path / "a", swapped), capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert "its tokenizer is not the one the shards were made with" in err
    assert (
        "the vocabularies differ at 2 of 64 ids (id 5: 'w6' vs 'w5', id 6: 'w5' vs 'w6'; vocab sha256" in err
    )
    wrong_eos = hf_checkpoint(tmp_path / "b", tokenizer_config={**TOKENIZER_CONFIG, "eos_token": "<s>"})
    code, err = run_main(tmp_path, shards, wrong_eos, capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert (
        "eos: the checkpoint's tokenizer has '<s>' = 1, the shards were packed with eos_id 2 ('</s>')" in err
    )


def test_vocab_size_auto_follows_the_shards_and_the_checkpoint(
    tmp_path: Path, shards: Path, capsys: pytest.CaptureFixture
) -> None:
    """auto = max(the shards' vocabulary, the checkpoint's rows): a smaller checkpoint (its tokenizer
    a prefix of the shards') gets mean rows, a padded one keeps its rows; also through a .ckpt
    converted with vocab_size auto (before: a raw shape-mismatch traceback)."""
    small = hf_checkpoint(tmp_path / "small", VOCAB[:40])
    tr, lines = trainer_from(shards, small, tmp_path / "o1")
    embed = next(p for p in tr.params if p.name == "model.embed_tokens.weight").asnumpy()
    old = hf_weights({**HF_CONFIG, "vocab_size": 40, "max_position_embeddings": 64}, seed=7)[
        "model.embed_tokens.weight"
    ]
    assert embed.shape == (64, 16) and np.array_equal(embed[:40], old)
    np.testing.assert_allclose(embed[40:], np.repeat(old.mean(0, keepdims=True), 24, 0), rtol=1e-6)
    assert any("extends the checkpoint's (40 -> 64 ids" in ln for ln in lines)
    padded = hf_checkpoint(tmp_path / "padded", [*VOCAB, *(f"x{i}" for i in range(8))])
    tr, _ = trainer_from(shards, padded, tmp_path / "o2")
    assert tr.model_cfg.vocab_size == 72
    with pytest.raises(Exception, match=r"model.vocab_size = 64 is smaller than the 72 embedding rows"):
        trainer_from(shards, padded, tmp_path / "o3", vocab_size=64)
    ckpt_dir = tmp_path / "converted"
    convert(small, ckpt_dir / "m.ckpt", training_model={**MODEL, "vocab_size": "auto"}, log=lambda m: None)
    tr, lines = trainer_from(shards, ckpt_dir / "m.ckpt", tmp_path / "o4")
    assert tr.model_cfg.vocab_size == 64
    assert any("vocabulary rows added" in ln for ln in lines)


def test_init_from_failures_are_one_line_errors(
    tmp_path: Path, shards: Path, capsys: pytest.CaptureFixture
) -> None:
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"not a checkpoint" * 64)
    wide = tmp_path / "wide"
    convert(
        write_hf(
            tmp_path / "hf32", hf_weights({**HF_CONFIG, "hidden_size": 32}), {**HF_CONFIG, "hidden_size": 32}
        ),
        wide / "m.ckpt",
        vocab_size=64,
        log=lambda m: None,
    )
    (tmp_path / "empty").mkdir()
    cases = [
        (tmp_path / "nowhere", "does not exist"),
        (garbage, "cannot read the MindSpore checkpoint"),
        (wide / "m.ckpt", "tensors have other shapes than the model (model.embed_tokens.weight (64, 32)"),
        (tmp_path / "empty", "must hold a Hugging Face checkpoint"),
    ]
    for path, message in cases:
        code, err = run_main(tmp_path, shards, path, capsys)
        assert code == 2 and len(err.splitlines()) == 1 and message in err, (path, err)
