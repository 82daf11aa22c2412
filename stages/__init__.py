"""Concrete stages, one per file. Each registers itself by name with ``dataprep.stage.register``;
the framework discovers them by walking this package."""
