"""Where the tests find the checkout's own files: they run from the source
tree (scripts/, test/lit/lcma-rewrite/Inputs/, tools/run_model.py are not installed)."""

from pathlib import Path

#: The repository root (this file is test/python/helpers/repo_paths.py).
ROOT = Path(__file__).resolve().parents[3]
