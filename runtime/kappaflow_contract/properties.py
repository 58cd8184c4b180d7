"""The `.properties` format of the config file the operator writes and the runtime reads.

Java's `java.util.Properties` rules, both directions, so a file written here loads the same in Java and
a file written by Java (or by hand) loads the same here:

- reading (`loads`, as `Properties.load`): natural lines end at `\\n`, `\\r` or `\\r\\n` (only those: not
  Python's `str.splitlines` set); leading space, tab and form feed are skipped; a line whose first other
  character is `#` or `!` is a comment; a line ending in an odd number of backslashes continues on the
  next one (whose leading whitespace is skipped); the key ends at the first unescaped `=`, `:` or
  whitespace, then whitespace and at most one `=` or `:` are skipped and the rest, trailing whitespace
  included, is the value; in keys and values `\\t \\n \\r \\f \\uXXXX` decode and a backslash before any
  other character keeps that character (`\\=`, `\\:`, `\\ `, `\\#`, `\\\\`). A backslash at the very end of
  the file is dropped. UTF-16 surrogate pairs written as two `\\uXXXX` escapes (Java's `store` to a byte
  stream) are joined into one character.
- writing (`dumps`, as `Properties.store` to a Writer): `key=value` lines; backslash, tab, newline,
  carriage return and form feed are escaped everywhere; in keys also `=`, `:`, space, `#` and `!`; in
  values a leading space, `#` or `!`. Everything else, non-ASCII included, is written as is (the file is
  UTF-8). The output for a given mapping is stable (keys sorted), so a ConfigMap's hash only changes when
  the config does.

One stricter rule than Java when reading with `require_separator=True` (the runtime's config file): a
line holding a key and no separator at all (`novalue`) is an error naming the line, not a key with an
empty value - in a config file it is a mistake, and kappaflow refuses what it would not honour.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

_WHITESPACE = " \t\f"
_DECODE = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ENCODE = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


class PropertiesError(ValueError):
    """Malformed properties text; `line` is the (1-based) natural line the logical line starts on."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.reason = message


def escape(text: str, *, is_key: bool) -> str:
    """One key or value as `Properties.store` writes it (see the module docstring)."""
    out: list[str] = []
    for i, ch in enumerate(text):
        encoded = _ENCODE.get(ch)
        if encoded is not None:
            out.append(encoded)
        elif (is_key and ch in "=: #!") or (i == 0 and ch in " #!"):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def dumps(properties: Mapping[str, str], *, comment: str | None = None) -> str:
    """`key=value` lines, keys sorted, after `# <comment>` when given; ends with a newline."""
    lines = [] if comment is None else [f"# {line}" for line in comment.splitlines() or [""]]
    lines += [f"{escape(k, is_key=True)}={escape(v, is_key=False)}" for k, v in sorted(properties.items())]
    return "\n".join(lines) + "\n"


def _natural_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based number, line) for each line ended by `\\n`, `\\r` or `\\r\\n`, as Java's LineReader."""
    number, start, i, n = 1, 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n" or ch == "\r":
            yield number, text[start:i]
            if ch == "\r" and i + 1 < n and text[i + 1] == "\n":
                i += 1
            number += 1
            start = i + 1
        i += 1
    if start < n:
        yield number, text[start:]


def _odd_trailing_backslashes(line: str) -> bool:
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first natural line's number, logical line): comments and blank lines gone, continuations joined."""
    parts: list[str] = []
    first = 0
    for number, raw in _natural_lines(text):
        line = raw.lstrip(_WHITESPACE)
        if not parts:
            if not line or line[0] in "#!":
                continue
            first = number
        if _odd_trailing_backslashes(line):
            parts.append(line[:-1])
            continue
        parts.append(line)
        yield first, "".join(parts)
        parts = []
    if parts:  # a continuation at the end of the text: the backslash is dropped, the line kept
        yield first, "".join(parts)


def _unescape(text: str, number: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\" or i + 1 == n:
            out.append(ch)
            i += 1
            continue
        ch = text[i + 1]
        i += 2
        if ch == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError(number, f"malformed \\uXXXX escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_DECODE.get(ch, ch))
    joined = "".join(out)
    if any("\ud800" <= c <= "\udfff" for c in joined):  # Java writes a non-BMP char as two \u escapes
        joined = joined.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return joined


def _split(line: str) -> tuple[str, str, bool]:
    """(raw key, raw value, whether any separator was found), as `Properties.load0`."""
    n = len(line)
    key_end, value_start, has_sep, found, backslash = n, n, False, False, False
    for i, ch in enumerate(line):
        if not backslash and ch in "=:":
            key_end, value_start, has_sep, found = i, i + 1, True, True
            break
        if not backslash and ch in _WHITESPACE:
            key_end, value_start, found = i, i + 1, True
            break
        backslash = (not backslash) if ch == "\\" else False
    while value_start < n:
        ch = line[value_start]
        if ch not in _WHITESPACE:
            if has_sep or ch not in "=:":
                break
            has_sep = True
        value_start += 1
    return line[:key_end], line[value_start:], found


def loads(text: str, *, require_separator: bool = False) -> dict[str, str]:
    """Parse `.properties` text; a later duplicate key wins, as in Java. Raises `PropertiesError`."""
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value, found = _split(line)
        if require_separator and not found:
            raise PropertiesError(number, f"expected 'key=value', got {line!r}")
        result[_unescape(key, number)] = _unescape(value, number)
    return result
