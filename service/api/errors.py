"""How the API answers errors: one body shape, `{"detail": {"code", "message", ...}}` with a 4xx/5xx, and a
401 first for any request without a valid token."""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.utils import is_body_allowed_for_status_code
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.errors import KilnError
from service.core.db import Database
from service.core.security import user_for_token

from .auth import bearer_token
from .schemas.refusal import refusal_detail

# The code of an error raised with a message only: what its status means, as a stable word.
_STATUS_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "method_not_allowed", 409: "conflict", 413: "too_large", 415: "unsupported_media_type",
                 422: "invalid_request", 429: "rate_limited", 503: "unavailable"}


def error_detail(status_code: int, detail: Any) -> dict[str, Any]:
    """`detail` (a message, or a mapping with `message` and maybe `code` and more) as `{"code", "message", ...}`."""
    default_code = _STATUS_CODES.get(status_code, "server_error" if status_code >= 500 else "error")
    if isinstance(detail, Mapping):
        extra = {k: v for k, v in detail.items() if k not in ("code", "message")}
        return {"code": detail.get("code") or default_code, "message": str(detail.get("message", "")), **extra}
    return {"code": default_code, "message": str(detail)}


def _json_safe(value: Any) -> Any:
    """`value` with every NaN or infinity as its JSON5 spelling: an error may echo a request's `NaN`, which
    strict JSON (what the answer is written as) has no number for."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def error_response(status_code: int, detail: Any, headers: Optional[Mapping[str, str]] = None) -> JSONResponse:
    return JSONResponse({"detail": _json_safe(error_detail(status_code, detail))}, status_code=status_code,
                        headers=dict(headers) if headers else None)


def _validation_message(errors: list[dict[str, Any]]) -> str:
    def where(error: dict[str, Any]) -> str:
        loc = [str(p) for p in error.get("loc", ()) if p != "body"]
        return ".".join(loc) or "body"

    return "; ".join(f"{where(e)}: {e.get('msg')}" for e in errors)


def add_error_handlers(app: FastAPI, database: Database, api_prefix: str, open_paths: frozenset[str]) -> None:
    """Handlers for the compiler's errors, invalid requests and unparsable bodies under `api_prefix`;
    `open_paths` need no token."""

    def authenticated(request: Request) -> bool:
        try:
            token = bearer_token(request)
        except HTTPException:
            return False
        with database.session() as db:
            return user_for_token(db, token) is not None

    async def unauthorized_first(request: Request) -> Optional[JSONResponse]:
        # FastAPI parses a JSON body before it runs the auth dependency: without a valid token the
        # answer is still 401, so that nothing about the API is learned without one.
        path = request.url.path
        if path.startswith(api_prefix) and path not in open_paths \
                and not await run_in_threadpool(authenticated, request):
            return error_response(status.HTTP_401_UNAUTHORIZED,
                                  "missing, invalid or revoked token: send `Authorization: Bearer <token>`",
                                  headers={"WWW-Authenticate": "Bearer"})
        return None

    @app.exception_handler(KilnError)
    async def kiln_error(_request: Request, err: KilnError) -> JSONResponse:
        return error_response(status.HTTP_422_UNPROCESSABLE_CONTENT, {"message": str(err), "code": err.code})

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
        refused = await unauthorized_first(request)
        if refused is not None:
            return refused
        errors = jsonable_encoder(err.errors(), custom_encoder={Exception: str})
        message = refusal_detail(errors)
        if message is not None:  # only the schemas' own checks failed: their messages say it all
            return error_response(status.HTTP_422_UNPROCESSABLE_CONTENT, message)
        # pydantic's list stays under `errors` for clients that point at fields
        return error_response(status.HTTP_422_UNPROCESSABLE_CONTENT,
                              {"message": _validation_message(errors), "errors": errors})

    @app.exception_handler(StarletteHTTPException)  # FastAPI raises Starlette's for an unparsable body
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        # 400: FastAPI's "error parsing the body"; 404: a path under the API that no route serves
        if err.status_code in (status.HTTP_400_BAD_REQUEST, status.HTTP_404_NOT_FOUND):
            refused = await unauthorized_first(request)
            if refused is not None:
                return refused
        headers = getattr(err, "headers", None)
        if not is_body_allowed_for_status_code(err.status_code):
            return Response(status_code=err.status_code, headers=headers)
        return error_response(err.status_code, err.detail, headers)
