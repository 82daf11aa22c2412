"""Continued pretraining: ``model.init_from`` (a Hugging Face directory or a MindSpore .ckpt),
checked against the training config and the data's tokenizer (pretrain/hf_checks.py) and loaded
into the model. Every failure is a one-line ConfigError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from pretrain.config import ConfigError
from pretrain.hf_checks import TOKENIZER_FILES, CheckError, check_config, check_tokenizer, open_init_source


class InitFrom:
    """The checkpoint named by model.init_from. :meth:`open` classifies it (and reads a .ckpt);
    ``vocab_rows`` is its embedding rows (None if unknown), for ``vocab_size: auto``."""

    def __init__(self, path: str, log: Callable[[str], None]):
        import mindspore as ms

        self.log = log
        self._params: dict[str, np.ndarray] | None = None
        try:
            self.source = src = open_init_source(path)
        except CheckError as e:
            raise ConfigError(str(e)) from None
        self.vocab_rows: int | None = src.vocab_rows
        if src.kind == "hf":
            return
        try:
            params = ms.load_checkpoint(str(src.path))
        except Exception as e:  # MindSpore raises RuntimeError/ValueError with multi-line texts
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(
                f"model.init_from {src.path}: cannot read the MindSpore checkpoint ({first})"
            ) from None
        self._params = {n: p.asnumpy() for n, p in params.items()}
        embed = self._params.get("model.embed_tokens.weight")
        if embed is not None:
            self.vocab_rows = int(embed.shape[0])

    def check(self, model: dict[str, Any], allow: Iterable[str], data: Path, split_out: Path) -> None:
        """config.json against the config's ``model`` section (a dict), and the tokenizer beside the
        checkpoint against the manifest's of ``data``; ConfigError (one line) on a mismatch."""
        from dataprep.formats.manifest import read_manifest

        src = self.source
        try:
            if src.hf_config is not None:
                for text in check_config(src.hf_config, model, set(allow), src.path):
                    self.log(f"init_from: training with the config's value although {text} (allowed)")
            else:
                self.log(f"init_from: no config.json beside {src.path}: model fields not compared")
            names = (*TOKENIZER_FILES, "tokenizer_config.json", "special_tokens_map.json", "config.json")
            if any((src.checkpoint_dir / n).is_file() for n in names):
                _, manifest = read_manifest(data)
                for note in check_tokenizer(src.checkpoint_dir, manifest.tokenizer or {}, split_out):
                    self.log(f"init_from: {note}")
            else:
                self.log(f"init_from: no tokenizer files beside {src.path}: vocabulary not compared")
        except CheckError as e:
            raise ConfigError(str(e)) from None

    def load_into(self, net: Any) -> None:
        """Load the weights into ``net``: every model parameter must come from the checkpoint with
        the model's shape, except embedding/lm_head rows added for a larger vocabulary
        (initialised with the mean of the old rows, as convert_hf.py does)."""
        import mindspore as ms

        from pretrain.convert_hf import VOCAB_ROWS, ConversionError, read_safetensors

        src = self.source
        if src.kind == "hf":
            try:
                params = read_safetensors(src.path)
            except ConversionError as e:
                raise ConfigError(f"model.init_from {src.path}: {e}") from None
            except Exception as e:  # safetensors raises its own errors on damaged files
                raise ConfigError(
                    f"model.init_from {src.path}: cannot read the safetensors files ({e})"
                ) from None
            params = {n: v for n, v in params.items() if not n.endswith("rotary_emb.inv_freq")}
        else:
            params = dict(self._params or {})
        tied_in_checkpoint = "lm_head.weight" not in params
        if net.lm_head is not None and tied_in_checkpoint and "model.embed_tokens.weight" in params:
            params["lm_head.weight"] = params["model.embed_tokens.weight"].copy()  # tied -> untied
            self.log("init_from: the checkpoint ties lm_head to the embedding: lm_head starts as a copy")
        model_shapes = {p.name: tuple(p.shape) for p in net.get_parameters()}
        missing = [n for n in model_shapes if n not in params]
        if missing:
            raise ConfigError(
                f"model.init_from {src.path}: {len(missing)} model parameters are not in the checkpoint "
                f"(e.g. {missing[:3]}); refusing to train with silently re-initialised layers"
            )
        extended, wrong = [], []
        for name, want in model_shapes.items():
            value = np.asarray(params[name], dtype=np.float32)
            if (
                value.shape != want
                and name in VOCAB_ROWS
                and value.shape[1:] == want[1:]
                and value.shape[0] < want[0]
            ):
                extra = np.repeat(value.mean(axis=0, keepdims=True), want[0] - value.shape[0], axis=0)
                value = np.concatenate([value, extra])
                extended.append(name)
            elif value.shape != want:
                wrong.append(f"{name} {value.shape} vs the model's {want}")
            params[name] = value
        if wrong:
            raise ConfigError(
                f"model.init_from {src.path}: {len(wrong)} tensors have other shapes than the model "
                f"({'; '.join(wrong[:3])}): the training config's model section does not describe this "
                "checkpoint"
            )
        if extended:
            self.log(f"init_from: vocabulary rows added (mean of the old rows) to {', '.join(extended)}")
        ms.load_param_into_net(net, {n: ms.Parameter(ms.Tensor(params[n]), name=n) for n in model_shapes})
        unused = sorted(set(params) - set(model_shapes))
        self.log(
            f"init_from: loaded {len(model_shapes)} parameters from {src.path}"
            + (f" ({len(unused)} checkpoint tensors unused, e.g. {unused[:2]})" if unused else "")
        )
