"""Downloads that stand on their own: every example's script, notebook and zips, complete.

sphinx-gallery copies each example script as it is and converts its reST comments to Markdown
with a few regular expressions, so the downloads keep what only Sphinx understands: a
``literalinclude`` of a Function's source stays a directive (the reader never sees the code the
page teaches) and roles such as ``:class:`~double_backward.Sinh``` stay as written. It has no
hook for either (``pypandoc`` leaves unknown roles and directives as they are too). So, after
the pages are read (``env-updated``, when cross-references can be resolved) and before the
downloads are copied, this extension writes them again from the example sources:

- each ``literalinclude`` becomes the code it shows, read by Sphinx's own ``LiteralIncludeReader``
  with the directive's options (``:pyobject:``, ``:lines:``, ``:start-after:``, ...), as a fenced
  Markdown block in the language of ``:language:`` or of the file name (C++ included);
- each cross-reference role becomes a Markdown link to the page or API entry it names (inline
  code without a link when the build has no base URL), ``:math:`` becomes ``$...$``;
- the notebook is sphinx-gallery's own (``sphinx_gallery.notebook``), with the first cell from
  ``package_wheel``; the script is the example's code with its text as ``#`` comments;
- a directive left over fails the build (``-W``), naming it: no download keeps reST;
- every zip of the gallery is rewritten from these files with repro-zipfile: timestamps from
  ``SOURCE_DATE_EPOCH`` (else 1980-01-01), fixed permissions, members sorted by name, so two
  builds give byte-identical zips.

The package stays the one source of truth: the downloads quote it, at build time.
"""

from __future__ import annotations

import copy
import io
import json
import re
import textwrap
import zipfile
from collections import defaultdict
from collections.abc import Callable
from itertools import count
from pathlib import Path

from editable_listings import PageListings
from package_wheel import (
    base_url,
    first_notebook_cell,
    install_command,
    page_needs,
    prerequisites_check,
)
from pygments.lexers import get_lexer_for_filename
from pygments.util import ClassNotFound
from repro_zipfile import ReproducibleZipFile
from sphinx.application import Sphinx
from sphinx.directives.code import LiteralInclude, LiteralIncludeReader
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx_gallery import py_source_parser
from sphinx_gallery.notebook import jupyter_notebook, rst2md

logger = logging.getLogger(__name__)

LITERALINCLUDE = re.compile(
    r"^(?P<indent>[ \t]*)\.\. literalinclude::[ \t]*(?P<path>\S+)[ \t]*\n"
    r"(?P<options>(?:(?P=indent)[ \t]+:[\w-]+:.*(?:\n|\Z))*)",
    flags=re.M,
)
OPTION = re.compile(r"^[ \t]+:(?P<name>[\w-]+):[ \t]*(?P<value>.*)$", flags=re.M)
# :role:`content` and :domain:role:`content`.
ROLE = re.compile(
    r":(?:(?P<domain>[a-z]+):)?(?P<role>[a-z][\w-]*):`(?P<content>[^`]+)`"
)
EXPLICIT_TITLE = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$", flags=re.S)
DIRECTIVE = re.compile(r"^[ \t]*\.\. [\w:-]+::", flags=re.M)
# ``.. raw:: html`` and its indented lines (the exercises' folded solutions: <details>).
RAW_HTML = re.compile(
    r"^(?P<indent>[ \t]*)\.\. raw:: html[ \t]*\n(?P<body>(?:[ \t]*\n|(?P=indent)[ \t]+\S.*\n)*)",
    flags=re.M,
)
# Roles whose text sphinx writes with "()" (add_function_parentheses).
CALLABLE_ROLES = {"func", "meth"}


def _code_language(path: Path, options: dict[str, str]) -> str:
    if "language" in options:
        return options["language"]
    try:
        return get_lexer_for_filename(path.name).aliases[0]
    except ClassNotFound:
        return "text"


def _read_include(
    env: BuildEnvironment, docname: str, match: re.Match
) -> tuple[Path, dict[str, str], str]:
    """The file, the options as written and the text of one ``literalinclude``."""
    raw = {m["name"]: m["value"].strip() for m in OPTION.finditer(match["options"])}
    options = {
        name: LiteralInclude.option_spec[name](value or None)
        for name, value in raw.items()
        if name in LiteralInclude.option_spec
    }
    _, path = env.relfn2path(match["path"], docname)
    text, _ = LiteralIncludeReader(path, options, env.config).read()
    return Path(path), raw, text


def _included_code(env: BuildEnvironment, docname: str, match: re.Match) -> str:
    """The fenced Markdown block showing what one ``literalinclude`` shows."""
    path, raw, text = _read_include(env, docname, match)
    fence = "````" if "```" in text else "```"
    caption = f"*{raw['caption']}*\n\n" if raw.get("caption") else ""
    language = _code_language(path, raw)
    return f"{caption}{fence}{language}\n{text.rstrip()}\n{fence}"


def _inventory_uri(env: BuildEnvironment, target: str) -> str | None:
    """The URI intersphinx knows for a Python object named ``target``, if any."""
    from sphinx.ext.intersphinx import InventoryAdapter

    for objtype, items in InventoryAdapter(env).main_inventory.items():
        if objtype.startswith("py:") and target in items:
            item = items[target]
            return item.uri if hasattr(item, "uri") else item[2]
    return None


def _local_uri(app: Sphinx, docname: str, anchor: str = "") -> str | None:
    base = base_url(app)
    if not base:
        return None
    return f"{base}{app.builder.get_target_uri(docname)}" + (
        f"#{anchor}" if anchor else ""
    )


def _resolve(app: Sphinx, docname: str, role: str, content: str) -> str:
    """Markdown for one cross-reference role: a link, or inline code if it resolves nowhere."""
    env = app.env
    explicit = EXPLICIT_TITLE.match(content)
    title, target = (
        (explicit["title"], explicit["target"]) if explicit else (None, content)
    )
    target = target.lstrip("!")
    uri = None
    if role == "doc":
        parent = docname.rpartition("/")[0]
        doc = (
            target.lstrip("/")
            if target.startswith("/")
            else f"{parent}/{target}".lstrip("/")
        )
        if doc in env.titles:
            title = title or env.titles[doc].astext()
            uri = _local_uri(app, doc)
        return f"[{title}]({uri})" if uri else (title or target)
    if role == "ref":
        label = env.get_domain("std").labels.get(target.lower())
        if label:
            title = title or label[2]
            uri = _local_uri(app, label[0], label[1])
        return f"[{title}]({uri})" if uri else (title or target)
    name = target.lstrip("~.")
    if title is None:
        title = name.rpartition(".")[2] if target.startswith("~") else name
        if role in CALLABLE_ROLES:
            title += "()"
    entry = env.get_domain("py").objects.get(name)
    if entry is not None:
        uri = _local_uri(app, entry.docname, entry.node_id)
    else:
        uri = _inventory_uri(env, name)
    code = f"`{title}`"
    return f"[{code}]({uri})" if uri else code


def to_markdown_parts(
    app: Sphinx, docname: str, rest: str, blocks: dict[str, str]
) -> str:
    """reST with roles as Markdown and each literalinclude as a placeholder paragraph.

    Returns the text for sphinx-gallery's ``rst2md``; the placeholders' Markdown is added to
    ``blocks``. The code goes in after that conversion, which would otherwise read code lines
    as reST.
    """

    def include(match: re.Match) -> str:
        key = f"DOUBLE-BACKWARD-INCLUDE-{len(blocks)}"
        blocks[key] = _included_code(app.env, docname, match)
        return f"{match['indent']}{key}\n"

    def role(match: re.Match) -> str:
        if match["role"] == "math":
            return f"${match['content']}$"
        return _resolve(app, docname, match["role"], match["content"])

    def raw_html(match: re.Match) -> str:
        # Markdown keeps HTML as it is (a notebook folds a <details> block too); a
        # placeholder, so that rst2md does not read it as reST.
        key = f"DOUBLE-BACKWARD-HTML-{len(blocks)}"
        blocks[key] = textwrap.dedent(match["body"]).strip("\n")
        return f"{match['indent']}{key}\n\n"

    return ROLE.sub(role, RAW_HTML.sub(raw_html, LITERALINCLUDE.sub(include, rest)))


def split_listings(
    app: Sphinx, docname: str, rest: str, page: PageListings
) -> list[tuple[str, str | list[str]]]:
    """``rest`` cut at each listing that becomes code: ("text", reST) and ("listing", cell).

    A cell is a one-item list: a later cell may add a line to it (see ``PageListings``).
    """
    pieces: list[tuple[str, str | list[str]]] = []
    start = 0
    for match in LITERALINCLUDE.finditer(rest):
        path, raw, text = _read_include(app.env, docname, match)
        cell = page.define(path, raw, text)
        if cell is None:
            continue
        pieces.append(("text", rest[start : match.start()]))
        pieces.append(("listing", cell))
        start = match.end()
    pieces.append(("text", rest[start:]))
    return [
        (label, piece) for label, piece in pieces if label != "text" or piece.strip()
    ]


def _fill_in(markdown: str, blocks: dict[str, str]) -> str:
    for key, code in blocks.items():
        markdown = markdown.replace(key, code)
    return markdown


def _comment(markdown: str) -> str:
    return "\n".join(f"# {line}".rstrip() for line in markdown.strip().splitlines())


def _check_no_rest(source: Path, kind: str, text: str) -> None:
    for match in DIRECTIVE.finditer(text):
        logger.warning(
            "complete_downloads: the %s of %s keeps the directive %r, which has no Markdown "
            "form here; teach docs/_ext/complete_downloads.py to convert it",
            kind, source.name, match[0].strip(), location=str(source),
        )  # fmt: skip


def write_downloads(app: Sphinx, source: Path, target: Path, docname: str) -> None:
    """Write ``target`` (.py, and .ipynb beside it) from the example ``source``."""
    gallery_conf = app.config.sphinx_gallery_conf
    _, blocks = py_source_parser.split_code_and_text_blocks(str(source))
    blocks = [
        py_source_parser.Block(
            label,
            py_source_parser.remove_config_comments(
                py_source_parser.remove_ignore_blocks(content)
            ),
            line,
        )
        for label, content, line in blocks
    ]
    all_blocks: dict[str, str] = {}
    page = PageListings(
        warn=lambda message: logger.warning(
            "complete_downloads: %s %s", source.name, message, location=str(source)
        )
    )
    # (label, content, line): "listing" is a code cell defining a listed object; its content is
    # a one-item list, final once every cell has been read.
    pending: list[tuple[str, str | list[str], int]] = []
    for label, content, line in blocks:
        if label == "text":
            for piece_label, piece in split_listings(app, docname, content, page):
                if piece_label == "text":
                    piece = to_markdown_parts(app, docname, piece, all_blocks)
                pending.append((piece_label, piece, line))
        else:
            pending.append((label, page.rewrite(content), line))
    page.finish()
    prepared = [
        py_source_parser.Block(
            "code" if label == "listing" else label,
            content[0] if label == "listing" else content,
            line,
        )
        for label, content, line in pending
    ]
    listing_cells = {
        index for index, entry in enumerate(pending) if entry[0] == "listing"
    }

    # The script: the docstring and text blocks as Markdown comments, the code as it is.
    heading_counter = count(start=1)
    heading_levels: defaultdict = defaultdict(lambda: next(heading_counter))

    def markdown(text: str) -> str:
        return _fill_in(
            rst2md(text + "\n", gallery_conf, target.parent, heading_levels), all_blocks
        )

    command = install_command(app)
    run_it = (
        f"# Run it yourself: install the package this script imports, then run it with python:\n"
        f"#     {command}"
        if command
        else "# Run it yourself: in the folder of your clone of the repository, install the\n"
        "# package this script imports, then run this script with python:\n"
        '#     pip install ".[pages]"'
    )
    needs = page_needs(source.read_text())
    check = prerequisites_check(needs, "script")
    parts = []
    for index, (label, content, _) in enumerate(prepared):
        if index in listing_cells:
            parts.append("# %%\n" + content.strip("\n"))
        elif label == "code":
            parts.append(content.strip("\n"))
        elif index == 0:
            docstring = markdown(content).strip().replace('"""', '\\"\\"\\"')
            parts.append(f'r"""\n{docstring}\n"""\n\n{run_it}')
            if check:
                parts.append(check.rstrip("\n"))
        else:
            parts.append("# %%\n" + _comment(markdown(content)))
    script = "\n\n".join(parts) + "\n"
    _check_no_rest(source, "script", script)
    write_if_changed(target, script.encode())

    notebook_path = target.with_suffix(".ipynb")
    if target.suffix in gallery_conf["notebook_extensions"]:
        conf = {
            **copy.copy(gallery_conf),
            "first_notebook_cell": first_notebook_cell(app, needs),
        }
        notebook = jupyter_notebook(prepared, conf, target.parent)
        for cell in notebook["cells"]:
            if cell["cell_type"] == "markdown":
                cell["source"] = [_fill_in("".join(cell["source"]), all_blocks)]
        text = json.dumps(notebook, indent=2)
        _check_no_rest(source, "notebook", "\n".join(
            "".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown"
        ))  # fmt: skip
        write_if_changed(notebook_path, text.encode())


def write_if_changed(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` unless it holds them already.

    The pages depend on their downloads (Sphinx tracks ``:download:`` files): a download
    rewritten with the same bytes but a new mtime would make every gallery page be read again
    on a rebuild that changed nothing.
    """
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)


def rewrite_zip(path: Path, read: Callable[[str, zipfile.ZipFile], bytes]) -> None:
    """Rewrite the zip at ``path`` reproducibly, each member's bytes from ``read(name)``."""
    with zipfile.ZipFile(path) as original:
        names = sorted(info.filename for info in original.infolist())
        members = [(name, read(name, original)) for name in names]
    buffer = io.BytesIO()
    with ReproducibleZipFile(
        buffer, "w", compression=zipfile.ZIP_DEFLATED
    ) as rewritten:
        for name, data in members:
            rewritten.writestr(name, data)
    write_if_changed(path, buffer.getvalue())


DOWNLOADS = (".py", ".ipynb", ".zip")


def _forget_download_dependencies(
    env: BuildEnvironment, docname: str, downloads: list[Path]
) -> None:
    """Stop the page depending on the downloads rewritten here.

    sphinx-gallery writes its own script and zips again on every build (they differ from
    ours), so the downloads always look newer than the page: every gallery page would be read
    again on a rebuild that changed nothing. The page does not read them; the HTML builder
    copies every download on every build whatever the dependencies say.
    """
    ours = {path.resolve() for path in downloads}
    srcdir = Path(env.srcdir)
    env.dependencies[docname] = {
        dependency for dependency in env.dependencies.get(docname, set())
        if (srcdir / dependency).resolve() not in ours
    }  # fmt: skip


def _write_all(app: Sphinx, env: BuildEnvironment) -> None:
    gallery_conf = app.config.sphinx_gallery_conf
    srcdir = Path(app.srcdir)
    for examples_dir, gallery_dir in zip(
        gallery_conf["examples_dirs"], gallery_conf["gallery_dirs"], strict=True
    ):
        examples, gallery = srcdir / examples_dir, srcdir / gallery_dir
        # Every example, in the gallery's section folders too (examples/<section>/).
        for target in sorted(gallery.rglob("*.py")):
            relative = target.relative_to(gallery)
            source = examples / relative
            docname = f"{gallery_dir}/{relative.with_suffix('').as_posix()}"
            if source.is_file() and docname in env.found_docs:
                write_downloads(app, source, target, docname)
                _forget_download_dependencies(
                    env, docname, [target.with_suffix(suffix) for suffix in DOWNLOADS]
                )

        # The gallery's zips and each example's own, in the section folders too; a member is
        # named relative to its zip's folder.
        zips = sorted(gallery.rglob("*.zip"))
        for path in zips:

            def current(name: str, original: zipfile.ZipFile, folder: Path = path.parent
                        ) -> bytes:  # fmt: skip
                member = folder / name
                return member.read_bytes() if member.is_file() else original.read(name)

            rewrite_zip(path, current)
        if f"{gallery_dir}/index" in env.found_docs:
            _forget_download_dependencies(env, f"{gallery_dir}/index", zips)


def setup(app: Sphinx) -> dict[str, object]:
    app.setup_extension("package_wheel")
    app.connect("env-updated", _write_all)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
