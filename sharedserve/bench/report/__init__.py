"""A bench report's files, all views of ``report.json``'s rows: ``write`` the JSON, CSV and
Markdown; ``page`` (with ``page_mix`` for a mix of models, ``table`` for its cells and ``css``
for its style) the HTML page; ``plots`` its plots (matplotlib, imported when drawing);
``sigfig`` how a figure is shown, in the files and on the terminal alike.
"""

from sharedserve.bench.report.css import CSS
from sharedserve.bench.report.page import render_html
from sharedserve.bench.report.sigfig import as_recorded, count, row_cell, sig3
from sharedserve.bench.report.write import (
    MODELS_COLUMNS,
    PER_MODEL_COLUMNS,
    ROW_COLUMNS,
    write_report,
)

__all__ = [
    "CSS",
    "MODELS_COLUMNS",
    "PER_MODEL_COLUMNS",
    "ROW_COLUMNS",
    "as_recorded",
    "count",
    "render_html",
    "row_cell",
    "sig3",
    "write_report",
]
