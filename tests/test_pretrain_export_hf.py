"""MindSpore -> Hugging Face export (pretrain/export_hf.py): a checkpoint trained here for two
steps is exported, convert_hf.py imports the export back into bit-identical tensors, transformers
reads the config and the tokenizer, and what LLaMA cannot express is refused in one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from dataprep.tokenizers.hf_files import write_hf_config
from dataprep.tokenizers.load import load_tokenizer
from dataprep.tokenizers.train import train_tokenizer
from pretrain.convert_hf import convert
from pretrain.export_hf import ExportError, export, find_source, main
from pretrain.synthetic_data import write_dataset

pytestmark = pytest.mark.e2e  # every case uses a checkpoint trained for two steps

REPO = Path(__file__).resolve().parent.parent
VOCAB = 320
TINY = {
    "seed": 5,
    "model": {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2},
    "train": {"steps": 2, "batch_size": 2, "log_interval": 1},
    "checkpoint": {"save_interval": 2},
    "eval": {"interval": 0},
}


def ms_tensors(path: Path) -> dict[str, np.ndarray]:
    import mindspore as ms

    return {n: p.asnumpy() for n, p in ms.load_checkpoint(str(path)).items()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A training output: two steps of a tiny LLaMA on synthetic shards whose prepared output
    holds a trained byte-level BPE with its Hugging Face files."""
    base = tmp_path_factory.mktemp("export")
    data = write_dataset(base / "data", rows=16, seq_length=16, vocab_size=VOCAB)
    texts = [f"第{i}篇文档，内容是 document number {i} with some text." for i in range(400)]
    tok_file = train_tokenizer(texts, data / "tokenizer", "bytebpe", VOCAB)
    tok = load_tokenizer(tok_file)
    write_hf_config(data / "tokenizer", tok.special_tokens(), 16)
    cfg = base / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(TINY))
    out = base / "run"
    cmd = [sys.executable, "pretrain/run.py", "--config", str(cfg), "--data", str(data), "--output", str(out)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_export_then_import_gives_bitwise_the_same_tensors(trained: Path, tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    assert main(["--checkpoint", str(trained), "--out", str(hf)]) == 0
    ckpt = trained / "checkpoints" / "rank_0" / "step_00000002" / "train.ckpt"
    original = ms_tensors(ckpt)
    report = convert(hf, tmp_path / "back.ckpt", log=lambda _: None)
    assert report.complete and not report.extended
    back = ms_tensors(tmp_path / "back.ckpt")
    model = {n: v for n, v in original.items() if n.startswith(("model.", "lm_head."))}
    assert set(back) == set(model) and len(model) == 2 + 9 * 2 + 1
    for name, value in model.items():
        assert back[name].dtype == value.dtype == np.float32
        assert np.array_equal(back[name].view(np.uint32), value.view(np.uint32)), name
    assert any(n.startswith("adam_m.") for n in original)  # optimizer state was there, left out


def test_transformers_reads_the_config_and_the_tokenizer(trained: Path, tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    hf = tmp_path / "hf"
    export(find_source(trained), hf, log=lambda _: None)
    resolved = json.loads((trained / "config.resolved.json").read_text())["model"]
    config = AutoConfig.from_pretrained(str(hf))
    assert config.architectures == ["LlamaForCausalLM"] and config.model_type == "llama"
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (VOCAB, 32, 2)
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    assert config.intermediate_size == 96  # the LLaMA rule the model applied: 8/3 * 32, rounded up to 32
    assert config.max_position_embeddings == resolved["seq_length"] == 16
    assert config.rms_norm_eps == resolved["rms_norm_eps"]
    assert config.rope_parameters["rope_theta"] == resolved["rope_theta"]
    assert config.tie_word_embeddings is False
    tok = AutoTokenizer.from_pretrained(str(hf))
    assert (
        (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
        == (
            config.bos_token_id,
            config.eos_token_id,
            config.pad_token_id,
        )
        == (1, 2, 0)
    )
    ours = load_tokenizer(trained.parent / "data" / "tokenizer")
    text = "第7篇文档 document"
    assert tok(text)["input_ids"] == ours.encode_batch([text])[0].tolist()
    assert sorted(p.name for p in hf.iterdir()) == [
        "config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]


def _with_model(trained: Path, tmp_path: Path, **over: Any) -> Path:
    cfg = json.loads((trained / "config.resolved.json").read_text())
    for key, value in over.items():
        section, field = key.split("__")
        cfg[section][field] = value
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"model__qkv_bias": True}, "q/k/v but not on o_proj"),
        ({"model__type": "gpt2"}, "not a LLaMA model"),
        ({"parallel__tensor_parallel": 2}, "rank 0 of a run with tensor_parallel=2"),
        ({"parallel__pipeline_stages": 2}, "only that rank's slice"),
        ({"model__hidden_size": 64}, "other shapes than the config's model"),
        ({"model__num_layers": 3}, "model tensors are missing"),
        ({"model__vocab_size": 300}, "the model's embedding 300 rows"),
    ],
)
def test_what_llama_cannot_express_is_refused_in_one_line(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture, over: dict[str, Any], message: str
) -> None:
    config = _with_model(trained, tmp_path, **over)
    step = trained / "checkpoints" / "rank_0" / "step_00000002"
    assert main(["--checkpoint", str(step), "--config", str(config), "--out", str(tmp_path / "hf")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "hf").exists()


def test_a_checkpoint_without_its_run_needs_config_and_tokenizer(trained: Path, tmp_path: Path) -> None:
    lone = tmp_path / "model.ckpt"
    shutil.copyfile(trained / "checkpoints" / "rank_0" / "step_00000002" / "train.ckpt", lone)
    with pytest.raises(ExportError, match="give --config"):
        find_source(lone)
    source = find_source(lone, config=trained / "config.resolved.json")
    with pytest.raises(ExportError, match="give --tokenizer"):
        export(source, tmp_path / "hf")
    source = find_source(
        lone, config=trained / "config.resolved.json", tokenizer=trained.parent / "data" / "tokenizer"
    )
    export(source, tmp_path / "hf", log=lambda _: None)
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    with pytest.raises(ExportError, match=r"state\.json"):
        find_source(trained, step=7)
