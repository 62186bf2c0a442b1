"""A schema's own check failing: the API answers its message as `{"detail": message}`, like its other 4xx."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from pydantic_core import PydanticCustomError

REFUSED = "refused"


def refused(message: str) -> PydanticCustomError:
    """What a validator raises; the message goes through as it is (no template formatting of its braces)."""
    return PydanticCustomError(REFUSED, "{message}", {"message": message})


def refusal_detail(errors: Sequence[dict[str, Any]]) -> Optional[str]:
    """The messages of the schema checks when only they failed; None when pydantic's own checks failed too
    (those keep pydantic's list of errors)."""
    if not errors or any(error["type"] != REFUSED for error in errors):
        return None
    return "; ".join(dict.fromkeys(error["msg"] for error in errors))
