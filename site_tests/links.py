"""Broken internal links and anchors of a built site, read from its files.

Every page is parsed once: the ids (and ``<a name>``) it defines and every URL it points to
(``href``, ``src``, ``srcset``). A URL inside the site must name a file that exists, and its
fragment an id of the page it names. URLs with a scheme or a host (other sites, ``data:``,
``mailto:``) are left alone: the checks never use the network.

Written here rather than run through a link checker: both tried keep one result per page and
check a fragment only if its link was seen before the page was fetched, so whether an anchor is
checked depends on the order of the crawl. LinkChecker's AnchorCheck has that bug upstream
(linkchecker issues 542, 555, 568), and it re-fetched and parsed a page for every distinct
anchor (5 minutes here for 37 pages); linkinator 7.6's ``--check-fragments`` passed a planted
broken anchor to a page it had already fetched. Parsing each page once has no order at all.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

# Attributes that hold a URL; srcset holds a list of "URL [descriptor]" entries.
URL_ATTRIBUTES = ("href", "src")


class _PageLinks(HTMLParser):
    """What one page defines (ids) and points to (URLs, with the line each is on)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.urls: list[tuple[int, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        line = self.getpos()[0]
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            elif name in URL_ATTRIBUTES:
                self.urls.append((line, value.strip()))
            elif name == "srcset":
                self.urls += [
                    (line, entry.split()[0])
                    for entry in value.split(",")
                    if entry.strip()
                ]

    handle_startendtag = handle_starttag


def _parse(page: Path) -> _PageLinks:
    parser = _PageLinks()
    parser.feed(page.read_text(encoding="utf-8"))
    parser.close()
    return parser


def _target(site: Path, page: Path, path: str) -> Path:
    """The file a URL path names: relative to its page, or to the site's root with a leading
    '/'; a folder means its index.html, as a static server serves it."""
    base = (
        PurePosixPath("/")
        if path.startswith("/")
        else PurePosixPath("/", page.parent.relative_to(site).as_posix())
    )
    resolved = site.joinpath(*(base / unquote(path)).parts[1:])
    return resolved / "index.html" if resolved.is_dir() else resolved


def link_problems(site: Path) -> list[str]:
    """Every URL of every page of ``site`` that names a missing file, a file outside the site,
    or a fragment its page does not define, as ``page:line: url: why``; and every page that is
    not UTF-8 (its links unread; a link to one of its fragments is then reported too)."""
    site = site.resolve()
    pages, problems = {}, []
    for page in sorted(site.rglob("*.html")):
        try:
            pages[page.resolve()] = _parse(page)
        except UnicodeDecodeError as error:  # the pages declare UTF-8
            problems.append(f"{page.relative_to(site).as_posix()}: not UTF-8: {error}")
    for page, links in pages.items():
        where = page.relative_to(site).as_posix()
        for line, url in links.urls:
            parts = urlsplit(url)
            if parts.scheme or parts.netloc:
                continue  # another site, data:, mailto:, javascript:
            target = (_target(site, page, parts.path) if parts.path else page).resolve()
            if not target.is_relative_to(site):
                problems.append(f"{where}:{line}: {url}: points outside the site")
            elif not target.is_file():
                problems.append(f"{where}:{line}: {url}: no such file")
            elif parts.fragment:
                defined = pages.get(target)
                fragment = unquote(parts.fragment)
                if defined is None:
                    problems.append(
                        f"{where}:{line}: {url}: a fragment of a file that is not a page"
                    )
                elif fragment not in defined.ids:
                    problems.append(
                        f"{where}:{line}: {url}: no id {fragment!r} on "
                        f"{target.relative_to(site).as_posix()}"
                    )
    return problems
