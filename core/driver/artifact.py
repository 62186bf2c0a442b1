"""The compiled result before and after it is saved: files in a working folder plus metadata and report."""
from __future__ import annotations

import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

from ..report.html import render_html
from ..runtime.package import HEADER, LIBRARY, METADATA, WEIGHTS, write_artifact


class Artifact:
    """A compiled model. `save(path)` writes the deployment `.tar.gz`; `load()` runs it in-process."""

    def __init__(self, directory: Path, metadata: dict[str, Any], report: dict[str, Any], owns_directory: bool = True):
        self.directory = Path(directory)
        self.metadata = metadata
        self.report = report
        self._owns = owns_directory
        self.compiled_model: Optional[bytes] = None  # the ONNX model compiled (an int8 compile's QDQ model)

    @property
    def library(self) -> Path:
        return self.directory / self.metadata.get("library", LIBRARY)

    @functools.cached_property
    def report_html(self) -> str:
        """The report page, rendered once (charts take a moment: a quick compile's has none) for the artifact and for
        the service."""
        return render_html(self.report, draw_charts=not self.report.get("quick"))

    def save(self, path: "str | Path") -> Path:
        path = Path(path)
        return write_artifact(path, library=self.library, weights=self.directory / WEIGHTS, metadata=self.metadata,
                              header=(self.directory / self.metadata.get("header", HEADER)).read_text(), report=self.report,
                              report_html=self.report_html, compresslevel=0 if self.report.get("quick") else 6)

    def load(self):
        from ..runtime import load

        return load(self.directory)

    def cleanup(self) -> None:
        if self._owns:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __del__(self):
        try:
            self.cleanup()
        except Exception:  # interpreter shutdown: nothing left to clean with
            pass


def new_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="kiln-build-"))


def write_metadata(directory: Path, metadata: dict[str, Any]) -> None:
    (directory / METADATA).write_text(json.dumps(metadata, indent=2))

