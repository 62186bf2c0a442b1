"""An artifact's name: the prefix of its library (libNAME.so), header (NAME.h) and exported C symbols."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..errors import ArtifactNameError

DEFAULT_PREFIX = "kiln"  # the unprefixed default: libkiln_model.so, kiln_model.h, kiln_load, ... as always
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]{0,31}")


@dataclass(frozen=True)
class ArtifactNames:
    prefix: str  # C symbols: PREFIX_load, PREFIX_run, ...; macros: upper case PREFIX_INPUT_0_NAME, ...

    @property
    def is_default(self) -> bool:
        return self.prefix == DEFAULT_PREFIX

    @property
    def library(self) -> str:
        return "libkiln_model.so" if self.is_default else f"lib{self.prefix}.so"

    @property
    def header(self) -> str:
        return "kiln_model.h" if self.is_default else f"{self.prefix}.h"

    @property
    def link_name(self) -> str:
        """What follows -l when linking against the library."""
        return self.library[3:-3]

    @property
    def macro(self) -> str:
        return self.prefix.upper()

    @property
    def model_type(self) -> str:
        return f"{self.prefix}_model"


def artifact_names(name: Optional[str] = None) -> ArtifactNames:
    """The names for `name` (None: the default); ArtifactNameError unless it is a lower-case C identifier
    that cannot clash with Kiln's own internal symbols."""
    if name is None or name == DEFAULT_PREFIX:
        return ArtifactNames(DEFAULT_PREFIX)
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise ArtifactNameError(f"bad artifact name {name!r}: use 1-32 lower-case letters, digits and '_', "
                                f"starting with a letter (e.g. resnet50); it prefixes the C symbols")
    if name.startswith("kiln") or name.endswith("_"):
        raise ArtifactNameError(f"bad artifact name {name!r}: names starting with 'kiln' or ending in '_' are "
                                f"reserved for Kiln's own symbols")
    return ArtifactNames(name)


__all__ = ["ArtifactNames", "artifact_names", "DEFAULT_PREFIX"]
