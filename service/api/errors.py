"""How the API answers errors: `{"detail": ...}` with a 4xx, and a 401 first for any request without a valid token."""
from __future__ import annotations

from typing import Optional

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.errors import KilnError
from service.core.db import Database

from .auth import bearer_token, user_for_token
from .schemas.refusal import refusal_detail


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
            return JSONResponse({"detail": "missing, invalid or revoked token: send `Authorization: Bearer <token>`"},
                                status_code=status.HTTP_401_UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
        return None

    @app.exception_handler(KilnError)
    async def kiln_error(_request: Request, err: KilnError) -> JSONResponse:
        return JSONResponse({"detail": {"message": str(err), "code": err.code}},
                            status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
        refused = await unauthorized_first(request)
        if refused is not None:
            return refused
        detail = refusal_detail(err.errors())
        if detail is not None:
            return JSONResponse({"detail": detail}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)
        return await request_validation_exception_handler(request, err)

    @app.exception_handler(StarletteHTTPException)  # FastAPI raises Starlette's for an unparsable body
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        if err.status_code == status.HTTP_400_BAD_REQUEST:  # FastAPI's "error parsing the body"
            refused = await unauthorized_first(request)
            if refused is not None:
                return refused
        return await http_exception_handler(request, err)
