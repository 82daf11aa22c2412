"""Logits of an exported checkpoint in transformers' LlamaForCausalLM against the MindSpore model.

    python bench/bench_export_hf_logits.py --run output/tiny --torch-python VENV/bin/python
        [--ids 8] [--out EXPORT_DIR]

Exports the run's newest checkpoint with pretrain/export_hf.py, computes the logits of a few
documents (token ids of the run's own shards, one document each: the MindSpore model attends
within documents, transformers over the whole input, which agree on one document) with
``pretrain.model.LlamaForCausalLM`` (float32) here and with ``transformers.LlamaForCausalLM``
(float32, eager attention) in another Python that has torch (MindSpore and torch are not
installed side by side here: ``python -m venv V && V/bin/pip install torch==2.13.0
'transformers>=5,<6' 'numpy<2' safetensors``). Prints the largest absolute difference, that
relative to the largest logit (the baseline: float32 rounding of the same arithmetic, ~1e-6),
and whether the arg-max token agrees at every position.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TORCH_SIDE = """
import json, sys
import numpy as np, torch, transformers
from transformers import LlamaForCausalLM
export, ids_file, out_file = sys.argv[1:4]
torch.set_grad_enabled(False)
model = LlamaForCausalLM.from_pretrained(export, dtype=torch.float32, attn_implementation="eager")
model.eval()
docs = json.loads(open(ids_file).read())
logits = [model(torch.tensor([d])).logits[0].numpy() for d in docs]
np.savez(out_file, *logits)
print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__}))
"""


def mindspore_logits(run: Path, docs: list[list[int]]) -> list[np.ndarray]:
    import mindspore as ms

    from pretrain.export_hf import find_source, model_config
    from pretrain.model import LlamaForCausalLM

    ms.set_context(mode=ms.PYNATIVE_MODE)
    source = find_source(run)
    cfg = model_config(source.config)
    net = LlamaForCausalLM(cfg, seed=0)
    not_loaded, _ = ms.load_param_into_net(net, ms.load_checkpoint(str(source.ckpt)))
    assert not [n for n in not_loaded if n.startswith(("model.", "lm_head."))], not_loaded
    out = []
    for d in docs:
        ids = np.asarray([d], dtype=np.int32)
        pos = np.arange(len(d), dtype=np.int32)[None, :]
        seg = np.zeros_like(ids)
        out.append(net.logits(ms.Tensor(ids), ms.Tensor(pos), ms.Tensor(seg)).asnumpy()[0])
    return out


def documents(run: Path, count: int, max_len: int) -> list[list[int]]:
    """The first ``count`` documents that lie whole in the first row of the run's first .bin train
    file (between two EOS), cut to ``max_len`` tokens."""
    from dataprep.formats.bin_shards import iter_bin_file
    from dataprep.formats.manifest import read_manifest

    record = json.loads((run / "run.json").read_text())
    out, manifest = read_manifest(record["data"][0]["path"])
    shards = manifest.shards
    entry = next(f for f in shards.splits["train"].files if f.format == "bin")
    docs: list[list[int]] = []
    for batch in iter_bin_file(out / entry.path, out / entry.index.path, shards.dtype, shards.row_length):
        for row in batch.tokens:
            ends = np.flatnonzero(row == shards.eos_id)
            docs += [row[a + 1 : b].tolist()[:max_len] for a, b in itertools.pairwise(ends) if b - a > 4]
            if len(docs) >= count:
                return docs[:count]
    return docs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="training output directory (pretrain/run.py --output)")
    ap.add_argument("--torch-python", required=True, help="a Python with torch and transformers")
    ap.add_argument("--ids", type=int, default=8, help="documents compared")
    ap.add_argument("--out", help="where to write the export (default: a temporary directory)")
    args = ap.parse_args()
    from pretrain.export_hf import export, find_source

    run = Path(args.run)
    with tempfile.TemporaryDirectory() as tmp:
        export_dir = Path(args.out or Path(tmp) / "hf")
        export(find_source(run), export_dir, log=lambda m: print(m, file=sys.stderr))
        seq = json.loads((export_dir / "config.json").read_text())["max_position_embeddings"]
        docs = documents(run, args.ids, seq)
        ids_file, out_file = Path(tmp) / "ids.json", Path(tmp) / "torch.npz"
        ids_file.write_text(json.dumps(docs))
        side = subprocess.run(
            [args.torch_python, "-c", TORCH_SIDE, str(export_dir), str(ids_file), str(out_file)],
            capture_output=True,
            text=True,
            check=True,
        )
        versions = json.loads(side.stdout.strip().splitlines()[-1])
        theirs = list(np.load(out_file).values())
    ours = mindspore_logits(run, docs)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True))
    scale = max(float(np.abs(a).max()) for a in ours)
    argmax = all(np.array_equal(a.argmax(-1), b.argmax(-1)) for a, b in zip(ours, theirs, strict=True))
    tokens = sum(len(d) for d in docs)
    print(f"documents {len(docs)}, tokens {tokens}, vocab {ours[0].shape[-1]}; {versions}")
    print(f"max |logit MindSpore - logit transformers| = {diff:.3e}; largest |logit| = {scale:.3f}")
    print(f"ratio to the largest logit: {diff / scale:.3e}; arg-max identical at every position: {argmax}")
    return 0 if argmax else 1


if __name__ == "__main__":
    sys.exit(main())
