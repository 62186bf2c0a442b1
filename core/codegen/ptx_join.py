"""PTX modules compiled apart (kernels on several cores: nvptx.emit_ptx) joined into the one the runtime loads."""
from __future__ import annotations

import re
from typing import Iterator, Sequence

from ..errors import CodegenError

_HEADER_END = re.compile(r"^\.address_size \d+[ \t]*\n", re.M)
_RETVAL = re.compile(r"\(\s*\.param[^)]*\)")  # a .func's return value, before its name
_TOKEN = re.compile(r"[^\s(\[=;,]+")
_PUBLIC = (".visible", ".extern", ".weak", ".common")  # linkage a rename would break: the runtime looks entries up


def _items(body: str) -> Iterator[tuple[str, str]]:
    """(declaration text, its comments) of each module-scope item, in order: an entry or function with its body, a
    variable, a declaration. A line's braces and parentheses balance inside an instruction, so depth is counted."""
    comments: list[str] = []
    lines: list[str] = []
    depth = 0
    for line in body.splitlines(keepends=True):
        stripped = line.strip()
        if not lines and (not stripped or stripped.startswith("//")):
            comments.append(line)
            continue
        lines.append(line)
        code = stripped.split("//", 1)[0].rstrip()
        depth += code.count("{") + code.count("(") - code.count("}") - code.count(")")
        if depth == 0 and (code.endswith(";") or code.endswith("}")):
            yield "".join(lines), "".join(comments)
            lines, comments = [], []
    if lines:
        raise CodegenError(f"PTX ends inside a module-scope item (a codegen bug): {lines[0].strip()!r}")


def _name(item: str) -> str:
    """The symbol an item defines or declares: its first token that is neither a directive nor a number."""
    for token in _TOKEN.findall(_RETVAL.sub(" ", item, count=1)):
        if not token.startswith(".") and not token.isdigit():
            return token
    raise CodegenError(f"no symbol in PTX item (a codegen bug): {item.splitlines()[0]!r}")


def _public(item: str) -> bool:
    return any(word in _PUBLIC for word in item.split("(", 1)[0].split())


def _rename(text: str, name: str, new: str) -> str:
    return re.sub(rf"(?<![\w$%]){re.escape(name)}(?![\w$])", new, text)


def join_ptx(parts: Sequence[str]) -> str:
    """One PTX module of `parts` (each a whole module for the same target): the first one's header, then every
    part's items in order. An item several parts repeat word for word is kept once; a module-local symbol that two
    parts define differently is renamed in the later part (`name_$_pN`); two public ones are a CodegenError.
    Deterministic: the same parts give the same bytes."""
    if not parts:
        raise CodegenError("no PTX to join")
    header = _HEADER_END.search(parts[0])
    if header is None:
        raise CodegenError("PTX without an .address_size header (a codegen bug)")
    out = [parts[0][:header.end()]]
    seen: dict[str, str] = {}  # symbol -> its item's text
    for p, part in enumerate(parts):
        end = _HEADER_END.search(part)
        if end is None or part[:end.end()] != out[0]:
            raise CodegenError(f"PTX part {p} was generated for another target or PTX version (a codegen bug)")
        body = part[end.end():]
        while True:  # renaming a clashing local symbol changes the items that use it: until none clashes
            clash = next((_name(item) for item, _ in _items(body)
                          if seen.get(_name(item), item) != item and not _public(item)), None)
            if clash is None:
                break
            body = _rename(body, clash, f"{clash}_$_p{p}")
        for item, comments in _items(body):
            name = _name(item)
            if name in seen:
                if seen[name] == item:
                    continue
                raise CodegenError(f"PTX parts define the public symbol {name} differently (a codegen bug)")
            seen[name] = item
            out.append(comments + item)
    return "".join(out)


__all__ = ["join_ptx"]
