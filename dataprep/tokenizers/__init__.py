"""Tokenizers, offline: loading a tokenizer.json or SentencePiece .model, the engines that encode it,
the checks of their output, training one on a sample of text, and the Hugging Face files beside it.

Modules (import from them; this package imports nothing):

* :mod:`~dataprep.tokenizers.load`: ``load_tokenizer(path)`` (cached per process),
  ``resolve_tokenizer_file``, ``describe`` (the manifest's "tokenizer" entry), ``check_engines``
  (the run's identity check, in the process that encodes for the tasks), ``decode_texts``.
* :mod:`~dataprep.tokenizers.base`: ``TextTokenizer`` (the encoding contract every engine keeps),
  ``SpecialTokens``, ``TokenizerError``, ``default_threads``.
* :mod:`~dataprep.tokenizers.engines`: ``HFTokenizer`` (fastokens, checked against the tokenizers
  library) and ``SentencePieceTokenizer``.
* :mod:`~dataprep.tokenizers.check`: the comparisons behind the checks: fastokens' ids against
  tokenizers' (budgets, mismatch records) and decoded text against the text (the round trip, and
  ``roundtrip_report``, its examples gathered for the manifest).
* :mod:`~dataprep.tokenizers.sample`: ``TextSample``, the deterministic bottom-k-by-hash sample a
  tokenizer trains on, and the held-out part.
* :mod:`~dataprep.tokenizers.train`: ``train_tokenizer`` (byte-level BPE, SentencePiece BPE /
  unigram), the held-out measure, and ``train_from_samples``, the tokenize stage's training job.
* :mod:`~dataprep.tokenizers.corpus`: ``dataprep train-tokenizer``: texts of inputs or of a
  run's documents, sampled and trained on.
* :mod:`~dataprep.tokenizers.hf_files`: tokenizer_config.json and special_tokens_map.json, read
  for special tokens, written for a trained tokenizer, copied beside a supplied one.

The tokenize stage (``stages/tokenize.py``) drives them in a run.
"""
