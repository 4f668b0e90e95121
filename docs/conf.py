"""The documentation site: Sphinx with the Furo theme, pages in Markdown (MyST).

Built in CI with every warning an error (tests/packaging/test_docs.py):
    python -m sphinx -W --keep-going -n -b html docs build/docs
"""
import fastbean

project = "fastbean"
author = "the fastbean authors"
copyright = "2026, " + author
release = version = fastbean.__version__

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# the README's and the changelog's own folder: not pages of the site
exclude_patterns = ["_build"]
# a link to a heading (page.md#heading) is checked like a link to a page
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
# "lexer not found" for a shell or a log excerpt is not worth failing the build
highlight_language = "none"

html_theme = "furo"
html_title = "fastbean " + release
html_static_path: list[str] = []
