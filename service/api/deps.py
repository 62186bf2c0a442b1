"""FastAPI dependencies: settings, a database session, the authenticated user."""
from __future__ import annotations

from typing import Annotated, Iterator, Optional

from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from service.core.settings import Settings
from service.core.tables import User
from service.core.security import user_for_token

from .auth import bearer_token


def app_settings(request: Request) -> Settings:
    return request.app.state.settings


def db_session(request: Request) -> Iterator[Session]:
    with request.app.state.db.session() as session:
        yield session


# Declares the Bearer scheme in the OpenAPI schema (Swagger UI's "Authorize", generated clients); the token
# itself is read by bearer_token, whose messages say what is wrong with a header.
BEARER = HTTPBearer(auto_error=False, scheme_name="bearer",
                    description="an API token: `kiln token create NAME`, or the admin token `kiln serve` prints once")


def current_user(token: Annotated[str, Depends(bearer_token)], db: Annotated[Session, Depends(db_session)],
                 _declared: Annotated[Optional[HTTPAuthorizationCredentials], Security(BEARER)] = None) -> User:
    user = user_for_token(db, token)
    # End the read transaction: its connection goes back to the pool (the user object stays loaded), so a
    # request that waits long before it next needs the database (an upload streaming, its pre-flight
    # check) holds no connection meanwhile. Found by bench/bench_load.py: 50 uploads exhausted the pool.
    db.commit()
    if user is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked token",
                            headers={"WWW-Authenticate": "Bearer"})
    return user


def owned(db: Session, user: User, table, object_id: str, noun: str):
    """The user's row of `table` with this id; 404 otherwise (another user's object looks like none)."""
    row = db.get(table, object_id)
    if row is None or row.user_id != user.id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no {noun} {object_id!r}")
    return row


SettingsDep = Annotated[Settings, Depends(app_settings)]
DbDep = Annotated[Session, Depends(db_session)]
UserDep = Annotated[User, Depends(current_user)]
