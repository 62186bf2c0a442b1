"""API tokens: created once and shown once, stored as sha256 hashes; looked up by the API, managed by `kiln token`."""
from __future__ import annotations

import hashlib
import secrets
from typing import Optional

from sqlalchemy import select
from sqlalchemy.orm import Session

from .tables import Token, User, utcnow

TOKEN_PREFIX = "kiln_"


def hash_token(token: str) -> str:
    # Tokens are 256 random bits, so a plain (unsalted) hash cannot be brute-forced; it lets us look them up.
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, user_name: str, admin: bool = False) -> str:
    """A new token for `user_name` (the user is created on first use). Returns the token, never stored."""
    user = session.scalar(select(User).where(User.name == user_name))
    if user is None:
        user = User(name=user_name, is_admin=admin)
        session.add(user)
        session.flush()
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(Token(user_id=user.id, token_hash=hash_token(token), prefix=token[:12]))
    session.commit()
    return token


def revoke_tokens(session: Session, user_name: str) -> int:
    """Revokes every active token of `user_name`; how many."""
    user = session.scalar(select(User).where(User.name == user_name))
    if user is None:
        return 0
    tokens = session.scalars(select(Token).where(Token.user_id == user.id, Token.revoked_at.is_(None))).all()
    for token in tokens:
        token.revoked_at = utcnow()
    session.commit()
    return len(tokens)


def revoke_token(session: Session, token_id: int) -> Optional[str]:
    """Revokes one token by its id; the name of its user, or None when no active token has that id."""
    token = session.scalar(select(Token).where(Token.id == token_id, Token.revoked_at.is_(None)))
    if token is None:
        return None
    token.revoked_at = utcnow()
    session.commit()
    return session.get(User, token.user_id).name


def list_tokens(session: Session) -> list[dict]:
    """Every token (never the token itself: its id, user, first characters and dates), oldest first."""
    rows = session.execute(select(Token, User).join(User, User.id == Token.user_id).order_by(Token.id)).all()
    return [{"id": t.id, "user": u.name, "admin": u.is_admin, "prefix": t.prefix, "created_at": t.created_at,
             "revoked_at": t.revoked_at} for t, u in rows]


def user_for_token(session: Session, token: str) -> Optional[User]:
    row = session.scalar(select(Token).where(Token.token_hash == hash_token(token), Token.revoked_at.is_(None)))
    return session.get(User, row.user_id) if row else None


def has_users(session: Session) -> bool:
    return session.scalar(select(User.id).limit(1)) is not None
