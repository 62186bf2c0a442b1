"""Bearer authentication of API requests: the token from the Authorization header (checked in service.core.security)."""
from __future__ import annotations

from fastapi import HTTPException, Request, status


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, message, headers={"WWW-Authenticate": "Bearer"})


def bearer_token(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if not header:
        raise _unauthorized("missing Authorization header: send `Authorization: Bearer <token>` "
                            "(create a token with `kiln token create NAME`)")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("malformed Authorization header: expected `Bearer <token>`")
    return token.strip()
