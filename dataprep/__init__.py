"""dataprep: offline data preparation for LLM pretraining (Chinese-first, MindSpore-native).

The framework (this package) defines documents, the stage protocol, recipes, readers' plumbing,
executors, stats and shard formats. Concrete stages live in the top-level ``stages`` package and
register themselves by name; nothing here imports them directly.
"""

__version__ = "0.1.0"
