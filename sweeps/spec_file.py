"""A spec file read safely, before anything heavy is imported: `python -m sweeps run` reads it first, so a file that
cannot be a spec (too large, malformed, a YAML tag, aliases that expand to billions of values) is refused in a
moment and in little memory. Validation of what it says is sweeps.spec's."""
from __future__ import annotations

from pathlib import Path

import yaml

from .errors import SpecError
from .spec_checks import MAX_EXPANDED, MAX_SPEC_BYTES


def read_yaml(path: str | Path) -> dict:
    """Safe-load a YAML file; a syntax error names the line."""
    path = Path(path)
    if not path.exists():
        raise SpecError(f"{path}: no such spec file")
    if path.is_file() and path.stat().st_size > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: {path.stat().st_size:,} bytes; allowed: a spec file of at most {MAX_SPEC_BYTES:,} "
                        "bytes (a limit no real spec comes near)")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot be read as a YAML spec file ({exc})") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        _check_expansion(root, path)
        data = yaml.safe_load(text)
    except SpecError:
        raise
    except ValueError as exc:  # an integer past Python's 4,300 digits to text
        raise SpecError(f"{path}: malformed YAML: {str(exc)[:120]}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        kind = ("YAML tag not allowed (specs are read with a safe loader)"
                if isinstance(exc, yaml.constructor.ConstructorError) else "malformed YAML")
        raise SpecError(f"{path}: {kind}{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping of spec keys at the top, got {type(data).__name__}")
    return data


def _check_expansion(root, path: Path) -> None:
    """A spec whose aliases expand to more than MAX_EXPANDED values is refused before it is built: YAML's `&a` and
    `*a` repeat a node without copying it, so 1 KB of nested aliases (a "billion laughs") builds fine and expands
    to billions of values as soon as anything walks it (a check, an error message, json). Counted on the node
    graph, each node once, its expansion summed."""
    size: dict[int, int] = {}
    order, stack = [], [root] if root is not None else []
    while stack:  # every distinct node, parents before children
        node = stack.pop()
        if id(node) in size:
            continue
        size[id(node)] = 0
        order.append(node)
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend(x for pair in node.value for x in pair)
    for node in reversed(order):  # children first
        kids = node.value if isinstance(node, yaml.SequenceNode) else [x for pair in node.value for x in pair] \
            if isinstance(node, yaml.MappingNode) else []
        size[id(node)] = 1 + sum(size[id(k)] for k in kids)
    total = size[id(root)] if root is not None else 0
    if total > MAX_EXPANDED:
        raise SpecError(f"{path}: its YAML aliases expand to {total:,} values; allowed: at most {MAX_EXPANDED:,} (a "
                        "limit no real spec comes near: nested aliases that repeat a node many times)")
