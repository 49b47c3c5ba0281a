"""MkDocs hooks: the README is the site's home page.

The repository's pages link to each other as a forge shows them: the README into
``docs/``, each page back to ``../README.md``. The site has no README, so its home page
is made of it, those links rewritten to the site's layout: nothing is kept twice.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

README = Path(__file__).resolve().parents[2] / "README.md"
_INTO_DOCS = re.compile(r"\]\((?:\./)?docs/")


def on_files(files: Files, config: Any) -> Files:
    home = _INTO_DOCS.sub("](", README.read_text(encoding="utf-8"))
    files.append(File.generated(config, "index.md", content=home))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    # A page n folders deep in docs/ reaches the README n+1 levels up, the home page n.
    depth = page.file.src_uri.count("/")
    return markdown.replace(
        "](" + "../" * (depth + 1) + "README.md", "](" + "../" * depth + "index.md"
    )
