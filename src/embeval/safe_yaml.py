"""The one YAML loader for files a user hands to embeval (run specs, subject specs, scenes, parameters, configs).

PyYAML's ``safe_load`` builds no objects but plain data, yet an alias (``*a``) makes the same node appear again
wherever it is named, so a few hundred bytes of nested aliases (a "billion laughs" file) stand for 10**9 values: the
load itself is quick, but anything that walks the data afterwards (hashing a spec, writing it out, checking it)
runs for hours and fills the memory. :class:`SafeLoader` is ``yaml.SafeLoader`` with bounds, checked while the
file is composed (before any value is built), each refused with a :class:`YAMLLimitError` that names the line:

* aliases may add at most :data:`MAX_ALIAS_NODES` values to the document when expanded (anchors for a few shared
  settings stay usable; a bomb does not), and an alias inside the node it names (a cycle) is refused;
* nesting is at most :data:`MAX_DEPTH` levels, aliases included (``[[[[...]]]]`` would otherwise end in a
  ``RecursionError``);
* an integer has at most :data:`MAX_INT_DIGITS` digits (Python refuses to convert longer decimal ones with a
  ``ValueError``, not a YAML error).

:func:`loads` parses text with it; :func:`embeval.errors.load_yaml` reads a file with it.
"""
from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, SequenceNode

__all__ = ["MAX_ALIAS_NODES", "MAX_DEPTH", "MAX_INT_DIGITS", "SafeLoader", "YAMLLimitError", "loads"]

#: values (scalars, lists, mappings) that aliases may add to a document in all, counted as if every alias were
#: written out; a document without aliases is bounded by the file size (embeval.errors.MAX_TEXT_BYTES) alone
MAX_ALIAS_NODES = 100_000
#: nesting levels of lists and mappings (the top level is 1), aliases expanded
MAX_DEPTH = 100
#: digits of an integer (Python's own limit for converting decimal text to int is 4300)
MAX_INT_DIGITS = 1000


class YAMLLimitError(yaml.MarkedYAMLError):
    """A document over one of the bounds of :class:`SafeLoader` (a ``yaml.YAMLError``, so callers that report
    syntax errors report it the same way, with its line and column)."""


class SafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the bounds of the module docstring (aliases, depth, integer digits)."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values when expanded, height), composed nodes
        self._depth = 0
        self._literal = 0  # values written in the text (each composed node once)

    def compose_document(self):
        node = super().compose_document()
        self._sizes = {}
        return node

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)  # an undefined alias is PyYAML's own error
            if id(node) not in self._sizes:
                raise YAMLLimitError(None, None, f"the alias *{self._anchor_of(node)} is used inside the value it names "
                                     "(a cycle); write the value out instead", mark)
            self._check(node, mark, self._depth)
            return node
        mark = self.peek_event().start_mark
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YAMLLimitError(None, None, f"nested deeper than {MAX_DEPTH} levels; flatten the data", mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._literal += 1
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = ()
        size, height = 1, 1
        for c in children:
            s, h = self._sizes[id(c)]
            size, height = size + s, max(height, h + 1)
        self._sizes[id(node)] = (size, height)
        self._check(node, mark, self._depth)
        return node

    def _check(self, node, mark, depth: int) -> None:
        """Refuse when the values composed so far, aliases expanded, exceed the bounds (``depth``: levels above ``node``)."""
        size, height = self._sizes[id(node)]
        if depth + height > MAX_DEPTH:
            raise YAMLLimitError(None, None, f"nested deeper than {MAX_DEPTH} levels once its aliases are expanded; "
                                 "flatten the data or write the values out", mark)
        if size - self._literal > MAX_ALIAS_NODES:
            raise YAMLLimitError(None, None, f"its aliases expand to more than {MAX_ALIAS_NODES} values (an alias bomb?); "
                                 "write the values out instead of nesting aliases", mark)

    def _anchor_of(self, node) -> str:
        return next((a for a, n in self.anchors.items() if n is node), "?")

    def construct_yaml_int(self, node):
        digits = len(str(node.value).replace("_", "").lstrip("+-"))
        if digits > MAX_INT_DIGITS:
            raise YAMLLimitError(None, None, f"an integer of {digits} digits (at most {MAX_INT_DIGITS}); "
                                 "give a smaller number", node.start_mark)
        return super().construct_yaml_int(node)


SafeLoader.add_constructor("tag:yaml.org,2002:int", SafeLoader.construct_yaml_int)


def loads(text: str | bytes) -> Any:
    """The data of one YAML document, read with :class:`SafeLoader` (``yaml.YAMLError`` when it is malformed or
    over a bound)."""
    loader = SafeLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
