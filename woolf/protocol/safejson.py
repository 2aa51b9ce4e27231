"""JSON from untrusted bytes: bounded size and nesting, strict UTF-8, no NaN/Infinity.

Usage:
    doc = loads_untrusted(raw, max_bytes=64 * 1024, max_depth=16)   # raises ValueError with a reason

Python's json module recurses once per nesting level, accepts `NaN` and
`Infinity`, reads `1e400` as infinity and `"\\ud800"` as half a character; a
hostile header nested 200k levels deep or a shape of `[Infinity]` must end
as a clear refusal, never as a RecursionError or an OverflowError far from
the parser.
"""

from __future__ import annotations

import json
import math
import re

_SURROGATE = re.compile(r"\\u[dD][89abcdefABCDEF]")  # an escape that may leave half a UTF-16 pair


class _Refused(ValueError):
    """Raised from inside the parser's hooks; its message is the whole reason."""


def _no_constants(name: str):
    raise _Refused(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"not valid JSON ({text[:40]} overflows to Infinity)")
    return value


def depth(doc, limit: int) -> int:
    """Nesting depth of parsed JSON, walked without recursion; stops counting past ``limit``."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            if deepest > limit:
                return deepest
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def loads_untrusted(raw: bytes, max_bytes: int, max_depth: int):
    """Parsed JSON, or ValueError naming what is wrong (size, encoding, syntax, nesting)."""
    if len(raw) > max_bytes:
        raise ValueError(f"{len(raw)} bytes, over the limit of {max_bytes}")
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text, parse_constant=_no_constants, parse_float=_finite)
    except UnicodeDecodeError:
        raise ValueError("not valid JSON (not UTF-8)") from None
    except RecursionError:
        raise ValueError(f"nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at byte {exc.pos})") from None
    except _Refused as exc:
        raise ValueError(str(exc)) from None
    except ValueError as exc:  # an integer past Python's 4300-digit limit
        raise ValueError(f"not valid JSON ({exc})") from None
    if depth(doc, max_depth) > max_depth:
        raise ValueError(f"nested deeper than {max_depth} levels")
    if _SURROGATE.search(text):
        try:  # a lone surrogate decodes to a str that is no UTF-8 text (serde_json refuses it too)
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("not valid JSON (a lone UTF-16 surrogate is no character)") from None
    return doc
