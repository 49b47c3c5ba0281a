"""The status page's DOM as tests read it: a small tree from the stdlib's html.parser.

Used on what the probe serves and on what headless Chromium dumps after rendering it
(``--dump-dom``), so the same assertions hold for both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(
            child if isinstance(child, str) else child.text() for child in self.children
        ).strip()

    def iter(self) -> Iterator[Element]:
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[Element]:
        return [
            e
            for e in self.iter()
            if (tag is None or e.tag == tag) and (cls is None or cls in e.classes)
        ]

    def by_id(self, ident: str) -> Element | None:
        return next((e for e in self.iter() if e.attrs.get("id") == ident), None)

    def cell(self, cls: str) -> str:
        """The text of the first descendant with class ``cls``."""
        found = self.find_all(cls=cls)
        assert found, f"no .{cls} in <{self.tag} {self.attrs}>"
        return found[0].text()


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self._open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs})
        self._open[-1].children.append(element)
        if tag not in _VOID:
            self._open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self._open) - 1, 0, -1):
            if self._open[depth].tag == tag:
                del self._open[depth:]
                return

    def handle_data(self, data: str) -> None:
        self._open[-1].children.append(data)


def parse(page: str) -> Element:
    builder = _Builder()
    builder.feed(page)
    builder.close()
    return builder.root
