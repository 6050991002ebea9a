"""Rewrite the example download zips so that two builds give byte-identical files.

sphinx-gallery zips the example scripts and notebooks with their file-system timestamps
and in directory-listing order. After the build, each zip in ``_downloads`` is rewritten
with repro-zipfile (timestamps from ``SOURCE_DATE_EPOCH``, else 1980-01-01; fixed
permissions) and its members sorted by name.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from repro_zipfile import ReproducibleZipFile
from sphinx.application import Sphinx


def rewrite_reproducibly(path: Path) -> None:
    """Rewrite the zip at ``path`` with fixed timestamps, modes and member order."""
    with zipfile.ZipFile(path) as original:
        members = sorted(
            (info.filename, original.read(info)) for info in original.infolist()
        )
    with ReproducibleZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as rewritten:
        for name, data in members:
            rewritten.writestr(name, data)


def _rewrite_downloads(app: Sphinx, exception: Exception | None) -> None:
    if exception is None:
        for path in sorted(Path(app.outdir, "_downloads").rglob("*.zip")):
            rewrite_reproducibly(path)


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("build-finished", _rewrite_downloads)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
