"""The Functions a page shows, as code a reader can edit in its downloads.

A page shows a Function of the package with ``literalinclude`` and ``:pyobject:``; its code cells
then import it (``from double_backward import Square``). In the downloads, that listing becomes a
code cell that defines the object, with the imports it needs, and the cells after it use that
definition, so that editing ``ctx.save_for_backward(x)`` in the notebook changes what runs:

- :func:`definition_cell`: the object's source as the page shows it, after the imports its code
  needs, read from its module's ``ast``: the module's imports that bind a name the source uses
  (relative imports made absolute) and the module's own names (helpers such as
  ``check_real_tensor``) imported from it. Names defined by a listing earlier on the page are
  left to that definition;
- :class:`PageListings`: walks a page's cells in order, and rewrites the imports of each code
  cell: a name that is a listed object (the same object, whatever module re-exports it) is
  taken from the definition above, ``from double_backward import Square as OldSquare``
  becoming ``OldSquare = Square``; ``module.Square`` becomes ``Square`` where ``module`` is
  imported whole; a function of the package that calls a listed object (a wrapper such as
  ``sinh``) is defined in the cell too, so that it calls the edited one.

A whole top-level class or function (``:pyobject: Name``, no line selection) becomes code, and so
do two kinds of listing the pages teach in pieces:

- custom operators (``torch.library.custom_op``), listed as a range of whole statements
  (``:start-after:``/``:end-before:``): the cell holds the range, the module's statements
  before it that the range needs and the page does not show (helpers, constants), and the
  registrations after it onto the operators it defines (``@cube.register_vmap``), each part
  labelled. The operators are registered under the namespace ``my_ops`` instead of the
  package's: ``custom_op`` with a name already registered replaces that operator for the whole
  process (torch 2.13 allows it), so a reader's edited ``double_backward::cube`` would silently
  replace the package's wherever it is used. The package's
  ``custom_ops`` module is never imported by the downloads' cells (the imports of its names
  are rewritten), so nothing redefines the reader's;
- C++ (:data:`CPP_BUILDERS`): the first listing of a C++ file becomes a cell holding the whole
  file as a string, built with the package's build function, which makes it the extension the
  later cells call; later listings of the same file stay listings (the cell above holds them).

A method (``:pyobject: Sinh.forward``) defines its whole class, and a package function an earlier
cell imported that calls it (``sinh``) is defined again after it. Other listings (``:lines:``, a
range of lines that registers nothing) stay listings. What cannot be
rewritten (a name imported again while a later listing of the same name hides it, an operator
used before any cell defines it) is reported, so that a new page fails the build rather than
ship a download whose edits change nothing.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import inspect
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

# literalinclude options that keep the listing a whole definition.
WHOLE_DEFINITION_OPTIONS = {"pyobject", "caption", "name", "class", "emphasize-lines",
                            "linenos", "lineno-start", "language", "force"}  # fmt: skip
PACKAGE = "double_backward"


def module_name(path: Path) -> str | None:
    """The dotted name of the module at ``path``, from the packages (``__init__.py``) it is in."""
    path = path.resolve()
    if path.suffix != ".py":
        return None
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts) if len(parts) > 1 or path.name == "__init__.py" else None


@dataclass(frozen=True)
class _Namespace:
    """A module's top-level names: the import that binds each, or the module defining it."""

    imports: dict[str, str]  # name -> "import x" / "from a import b as name"
    definitions: dict[str, ast.stmt]  # name -> the def/class/assignment binding it
    source: str


def _import_line(module: str | None, name: str, asname: str | None) -> str:
    alias = f" as {asname}" if asname and asname != name else ""
    return f"from {module} import {name}{alias}" if module else f"import {name}{alias}"


def namespace(module: str) -> _Namespace:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    source = Path(spec.origin).read_text()
    package = module if spec.submodule_search_locations else module.rpartition(".")[0]
    imports: dict[str, str] = {}
    definitions: dict[str, ast.stmt] = {}

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    bound = alias.asname or alias.name.partition(".")[0]
                    imports[bound] = _import_line(None, alias.name, alias.asname)
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                absolute = importlib.util.resolve_name(
                    "." * node.level + (node.module or ""), package
                ) if node.level else node.module  # fmt: skip
                for alias in node.names:
                    imports[alias.asname or alias.name] = _import_line(
                        absolute, alias.name, alias.asname
                    )
            elif isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ):
                definitions[node.name] = node
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = (
                    node.targets if isinstance(node, ast.Assign) else [node.target]
                )
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            definitions[name.id] = node
            elif isinstance(node, ast.If | ast.Try):  # `if TYPE_CHECKING:`, fallbacks
                visit(node.body)

    visit(ast.parse(source).body)
    return _Namespace(imports, definitions, source)


# literalinclude options that select whole statements of a module by their text.
RANGE_OPTIONS = {"start-after", "end-before", "start-at", "end-at", "caption", "name",
                 "class", "emphasize-lines", "linenos", "lineno-start", "language",
                 "force"}  # fmt: skip
# The namespace a download registers its custom operators in (the package's is PACKAGE).
DOWNLOAD_OP_NAMESPACE = "my_ops"
# C++ files a page lists -> (module, function) that builds a given source text and makes it the
# extension the package's functions call, and the variable the cell holds the source in.
CPP_BUILDERS = {
    "cube.cpp": ("double_backward.functions.cpp_extension", "load_extension", "CUBE_CPP"),
}

# Decorators that register the object under a global name (torch.library.custom_op,
# register_fake, ...): defining it again in a notebook that imported the package would raise.
REGISTERING_DECORATOR = re.compile(r"\b(library|custom_op|register_\w+)\b")


def _registers(node: ast.stmt) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return any(REGISTERING_DECORATOR.search(ast.unparse(d)) for d in decorators)


def _used_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _definition_node(module: str, name: str) -> tuple[_Namespace, ast.stmt] | None:
    space = namespace(module)
    node = space.definitions.get(name)
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return None
    return space, node


def definition_source(module: str, name: str) -> str | None:
    """The source of the top-level class or function ``name`` of ``module``, decorators first."""
    found = _definition_node(module, name)
    if found is None:
        return None
    space, node = found
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return "\n".join(space.source.splitlines()[start - 1 : node.end_lineno])


def needed_imports(
    module: str, name: str, source: str, defined: dict[str, object]
) -> list[str]:
    """The import lines ``source`` (``name`` of ``module``) needs.

    A name in ``defined`` (the page's definitions so far) is left to that definition when it
    is the object the module means by it.
    """
    space = namespace(module)
    imported = importlib.import_module(module)
    used = {
        n for n in _used_names(ast.parse(source)) - {name} - set(dir(builtins))
        if not (n in defined and getattr(imported, n, None) is defined[n])
    }  # fmt: skip
    outside = [space.imports[n] for n in sorted(used) if n in space.imports]
    own = sorted(n for n in used if n in space.definitions and n not in space.imports)
    # Standard library, third party, the package: one line per module, as isort would.
    groups: list[dict[str, list[str]]] = [{}, {}, {}]
    for line in outside:
        match = re.fullmatch(r"from (\S+) import (.+)", line)
        imported_from = match[1] if match else line.split()[1]
        top = imported_from.partition(".")[0]
        group = groups[
            2 if top == PACKAGE else 0 if top in sys.stdlib_module_names else 1
        ]
        group.setdefault(imported_from, []).append(match[2] if match else line)
    if own:
        groups[2].setdefault(module, []).extend(own)
    lines: list[str] = []
    for group in groups:
        if group and lines:
            lines.append("")
        for imported_from in sorted(group):
            names = group[imported_from]
            plain = [n for n in names if n.startswith("import ")]
            lines += sorted(set(plain))
            names = sorted(set(names) - set(plain))
            if names:
                lines.append(f"from {imported_from} import {', '.join(names)}")
    return lines


@dataclass
class Listing:
    """One listed object: where it comes from, the object itself, the cell that defines it."""

    module: str
    name: str
    obj: object
    cell: list[
        str
    ]  # the cell's text, a one-item list so that aliases can be added later


def _header(listing: Listing, text: str) -> str:
    where = listing.module.replace(".", "/") + ".py"
    return (
        f"# `{listing.name}`, as in {where}, defined here:\n"
        f"# edit it, and the cells below run your version.\n{text}"
    )


def _resolve(module: str, name: str) -> object:
    imported = importlib.import_module(module)
    if hasattr(imported, name):
        return getattr(imported, name)
    return importlib.import_module(f"{module}.{name}")


def _statement_start(node: ast.stmt) -> int:
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _registers_onto(node: ast.stmt, names: set[str]) -> bool:
    """``@name.register_x`` on a definition, or a ``name.register_x(...)`` call."""
    candidates = list(getattr(node, "decorator_list", []))
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        candidates.append(node.value.func)
    for candidate in candidates:
        target = candidate.func if isinstance(candidate, ast.Call) else candidate
        if (
            isinstance(target, ast.Attribute)
            and target.attr.startswith("register_")
            and isinstance(target.value, ast.Name)
            and target.value.id in names
        ):
            return True
    return False


def _in_download_namespace(code: str) -> str:
    """``code`` with the package's operator namespace in string literals renamed."""
    code = re.sub(
        rf"""(["']){PACKAGE}(::\w+)?\1""",
        lambda m: f"{m[1]}{DOWNLOAD_OP_NAMESPACE}{m[2] or ''}{m[1]}",
        code,
    )
    return re.sub(
        rf"""^(\w+ = (["']){DOWNLOAD_OP_NAMESPACE}\2)$""",
        rf'\1  # the package registers its own as "{PACKAGE}::..."',
        code,
        flags=re.M,
    )


@dataclass
class PageListings:
    """The listings of one page, in order, and the rewriting of the code cells that follow.

    ``warn(message)`` is called for what cannot be rewritten.
    """

    warn: object
    listings: list[Listing] = field(default_factory=list)
    bindings: dict[str, Listing] = field(
        default_factory=dict
    )  # name -> current definition
    module_aliases: dict[str, types.ModuleType] = field(default_factory=dict)
    # module -> indexes of its top-level statements a cell defines already.
    emitted: dict[str, set[int]] = field(default_factory=dict)
    cpp_files: set[Path] = field(default_factory=set)
    # Names earlier cells imported from the package, as they were left: name -> object.
    imported: dict[str, object] = field(default_factory=dict)
    # Module-level names a statements cell uses but leaves to a later cell: name -> module.
    awaited: dict[str, str] = field(default_factory=dict)
    # A package module a listing cell uses by name (``layer_norm.statistics``): (cell, name,
    # module, the names listed before that cell).
    module_globals: list[tuple[list[str], str, types.ModuleType, set[str]]] = field(
        default_factory=list
    )

    def define(
        self, path: Path, options: dict[str, str], text: str
    ) -> list[str] | None:
        """A cell (as a one-item list) defining the listed object, or None to keep a listing."""
        name = options.get("pyobject", "")
        module = module_name(path)
        if path.name in CPP_BUILDERS:
            return self._define_cpp(path, options)
        if "pyobject" not in options and module and module.startswith(PACKAGE):
            return self._define_statements(module, options, text)
        method = None
        if module and module.startswith(PACKAGE) and re.fullmatch(r"[A-Za-z_]\w*\.\w+", name):
            # A method (``Sinh.forward``): the cell defines its whole class, so that an edit
            # of the method the page shows changes what runs.
            whole = _definition_node(module, name.partition(".")[0])
            if whole is None or not isinstance(whole[1], ast.ClassDef):
                return None
            method, name = name, name.partition(".")[0]
            text = definition_source(module, name)
        if (
            not module
            or not module.startswith(PACKAGE)
            or not re.fullmatch(r"[A-Za-z_]\w*", name)
            or set(options) - WHOLE_DEFINITION_OPTIONS
            or definition_source(module, name) is None
        ):
            return None
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return None
        if any(_registers(node) for node in tree.body):
            return None
        imports = needed_imports(module, name, text, self._defined())
        listing = Listing(module, name, _resolve(module, name), [])
        space = namespace(module)
        for used in sorted(_used_names(tree)):
            found = re.fullmatch(r"from (\S+) import (\w+)", space.imports.get(used, ""))
            if found and found[2] == used and found[1].startswith(PACKAGE):
                imported = _resolve(found[1], used)
                if isinstance(imported, types.ModuleType):
                    self.module_globals.append(
                        (listing.cell, used, imported, set(self.bindings))
                    )
        body = "\n".join(imports) + ("\n\n\n" if imports else "") + text.rstrip()
        header = _header(listing, body)
        if method:
            header = header.replace(
                " defined here:\n", f" defined here\n# whole (the page shows `{method}`):\n", 1
            )
        listing.cell.append(header)
        self.listings.append(listing)
        self.bindings[name] = listing
        # A package function an earlier cell imported that calls this object (plot_20 imports
        # the wrapper `sinh` before it lists `Sinh.forward`): defined again after it.
        for target, obj in list(self.imported.items()):
            where = self._calls_a_listing(obj)
            if where is None:
                continue
            module_of, function = where
            source = definition_source(module_of, function)
            imports = needed_imports(module_of, function, source, self._defined())
            listing.cell[0] += (
                f"\n\n\n# `{function}`, imported above from the package, defined again here\n"
                f"# so that it uses this `{name}`.\n" + "\n".join(imports)
                + ("\n\n\n" if imports else "") + source
                + (f"\n\n\n{target} = {function}" if target != function else "")
            )  # fmt: skip
            del self.imported[target]
        return listing.cell

    def _define_cpp(self, path: Path, options: dict[str, str]) -> list[str] | None:
        """The whole C++ file as a string, built: for the first listing of the file only."""
        if path.resolve() in self.cpp_files or "lines" in options:
            return None
        self.cpp_files.add(path.resolve())
        module, builder, variable = CPP_BUILDERS[path.name]
        source = path.read_text()
        if '"""' in source:
            return None
        where = module_name(path.parent.parent / "__init__.py") or PACKAGE
        shown = f"{where.replace('.', '/')}/{path.parent.name}/{path.name}"
        cell = (
            f"# {path.name}, as in {shown}, whole (the page shows parts of it):\n"
            f"# edit it, and {builder}(source={variable}) below builds your version (a minute\n"
            "# the first time; cached by its text after that) and makes it the extension the\n"
            "# cells below call.\n"
            f"from {module} import {builder}\n\n"
            f'{variable} = r"""\n{source.rstrip()}\n"""\n\n'
            f"{builder}(source={variable})"
        )
        return [cell]

    def _define_statements(
        self, module: str, options: dict[str, str], text: str
    ) -> list[str] | None:
        """A cell defining the custom operators a range of whole statements registers."""
        if set(options) - RANGE_OPTIONS:
            return None
        space = namespace(module)
        body = [
            node for node in ast.parse(space.source).body
            if not isinstance(node, ast.Import | ast.ImportFrom)
            and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        ]  # fmt: skip
        listed = text.strip("\n")
        offset = space.source.find(listed)
        if not listed or offset < 0:
            return None
        first = space.source.count("\n", 0, offset) + 1
        last = first + listed.count("\n")
        inside = [i for i, node in enumerate(body) if first <= _statement_start(node)
                  and node.end_lineno <= last]  # fmt: skip
        partly = [i for i, node in enumerate(body) if i not in inside
                  and _statement_start(node) <= last and node.end_lineno >= first]  # fmt: skip
        if not inside or partly or not any(_registers(body[i]) for i in inside):
            return None
        emitted = self.emitted.setdefault(module, set())
        binder: dict[str, int] = {}
        for index, node in enumerate(body):
            for bound in _bound_names(node):
                binder.setdefault(bound, index)

        def needed_before(indexes: list[int], limit: int) -> list[int]:
            """Unemitted statements before ``limit`` that ``indexes`` need, transitively."""
            found: set[int] = set()
            todo = list(indexes)
            while todo:
                for used in _used_names(body[todo.pop()]):
                    index = binder.get(used)
                    if (index is not None and index < limit and index not in emitted
                            and index not in found and index not in inside):  # fmt: skip
                        found.add(index)
                        todo.append(index)
            return sorted(found)

        before = needed_before(inside, inside[0])
        defined = {n for i in inside for n in _bound_names(body[i])}
        after = [i for i, node in enumerate(body) if i > inside[-1] and i not in emitted
                 and _registers_onto(node, defined)]  # fmt: skip
        after_needs = [i for i in needed_before(after, after[-1] + 1 if after else 0)
                       if i not in before and i not in after]  # fmt: skip
        emitted.update(before, inside, after, after_needs)
        cell_names = {n for i in (*before, *inside, *after, *after_needs)
                      for n in _bound_names(body[i])}  # fmt: skip
        for index in (*before, *inside, *after, *after_needs):
            for used in _used_names(body[index]) - cell_names:
                if used in binder and binder[used] not in emitted:
                    self.awaited[used] = module
        for bound in cell_names:
            self.awaited.pop(bound, None)
        lines = space.source.splitlines()

        def code(indexes: list[int]) -> str:
            return "\n\n\n".join(
                "\n".join(lines[_statement_start(body[i]) - 1 : body[i].end_lineno])
                for i in indexes
            )

        where = module.replace(".", "/") + ".py"
        parts = []
        if before:
            parts.append("# Not shown on the page; the code it shows needs it:\n" + code(before))
        parts.append(f"# As the page shows it:\n{listed}")
        if after or after_needs:
            parts.append("# Not shown on the page: the rest of what it registers.\n"
                         + code(sorted(after_needs + after)))  # fmt: skip
        definitions = "\n\n\n".join(parts)
        renamed = _in_download_namespace(definitions)
        # Own names defined anywhere in the module are left to the cells (or reported when used
        # before any cell defines them): importing the module would register its operators.
        imported_module = importlib.import_module(module)
        own = {n: getattr(imported_module, n) for n in binder if hasattr(imported_module, n)}
        imports = needed_imports(module, "", renamed, {**own, **self._defined()})
        header = (
            f"# The operators the page teaches, as in {where}, defined\n"
            "# here: edit them, and the cells below run your version."
        )
        if renamed != definitions:
            header += (
                f'\n# Registered as "{DOWNLOAD_OP_NAMESPACE}::...", not '
                f'"{PACKAGE}::...": an operator defined again under\n'
                "# its name replaces the package's for the whole process."
            )
        cell = [f"{header}\n" + "\n".join(imports) + ("\n\n\n" if imports else "")
                + renamed]  # fmt: skip
        for index in (*before, *inside, *after_needs, *after):
            node = body[index]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                listing = Listing(module, node.name, getattr(imported_module, node.name), cell)
                self.listings.append(listing)
                self.bindings[node.name] = listing
        return cell

    def finish(self) -> None:
        """Report the names a statements cell left to a later cell that never came."""
        for name, module in sorted(self.awaited.items()):
            self.warn(
                f"defines operators of {module} that use `{name}`, which no cell defines: "
                f"list it on the page"
            )

    def _defined(self) -> dict[str, object]:
        return {name: listing.obj for name, listing in self.bindings.items()}

    def _listing_of(self, obj: object) -> Listing | None:
        for listing in reversed(self.listings):
            if listing.obj is obj:
                return listing
        return None

    def _calls_a_listing(self, obj: object) -> tuple[str, str] | None:
        """(module, name) of a package function or class whose code uses a listed name."""
        module = getattr(obj, "__module__", None)
        name = getattr(obj, "__name__", None)
        if not (isinstance(module, str) and module.startswith(PACKAGE) and name):
            return None
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            return None
        source = definition_source(module, name)
        if source is None:
            return None
        used = _used_names(ast.parse(source))
        for listed, listing in self.bindings.items():
            if listed in used and getattr(
                importlib.import_module(module), listed, None
            ) is (listing.obj):
                return module, name
        return None

    def _from_import(self, node: ast.ImportFrom) -> list[str]:
        """The lines replacing one ``from double_backward... import ...`` statement."""
        kept, lines = [], []
        for alias in node.names:
            target = alias.asname or alias.name
            obj = _resolve(node.module, alias.name)
            listing = self._listing_of(obj)
            if isinstance(obj, types.ModuleType):
                self.module_aliases[target] = obj
                kept.append(alias)
            elif listing is not None:
                if self.bindings.get(listing.name) is listing:
                    if target != listing.name:
                        lines.append(f"{target} = {listing.name}  # defined above")
                elif target != listing.name:
                    # A later listing of the same name hides it: name it where it is defined.
                    listing.cell[0] += (
                        f"\n\n\n{target} = {listing.name}  # the name the cells below use"
                    )
                else:
                    self.warn(
                        f"imports {node.module}.{alias.name}, whose listing above is hidden "
                        f"by another `{listing.name}`; import it under another name"
                    )
                    kept.append(alias)
            elif (where := self._calls_a_listing(obj)) is not None:
                module, name = where
                source = definition_source(module, name)
                imports = needed_imports(module, name, source, self._defined())
                lines.append(
                    f"# `{name}`, as in {module.replace('.', '/')}.py, defined here\n"
                    "# so that it uses the definitions above.\n"
                    + "\n".join(imports)
                    + ("\n\n\n" if imports else "")
                    + source
                )
                if target != name:
                    lines.append(f"{target} = {name}")
            else:
                self.imported[target] = obj
                kept.append(alias)
        if kept:
            names = ", ".join(
                a.name + (f" as {a.asname}" if a.asname else "") for a in kept
            )
            lines.insert(0, f"from {node.module} import {names}")
        return lines

    def _unshadow(self, tree: ast.Module) -> None:
        """Listing cells that use a package module by a name this cell binds to something
        else (plot_07: the module ``layer_norm``, then the function ``layer_norm``) take
        ``module.name`` as ``name``: from the definitions above, else imported."""
        bound = {
            alias.asname or alias.name.partition(".")[0]
            for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        } | {n for node in tree.body for n in _bound_names(node)}  # fmt: skip
        for entry in list(self.module_globals):
            cell, name, module, listed_before = entry
            if name not in bound:
                continue
            self.module_globals.remove(entry)
            pattern = rf"(?<![\w.]){re.escape(name)}\.(\w+)"
            attributes = sorted(set(re.findall(pattern, cell[0])))
            text = re.sub(pattern, r"\1", cell[0])
            # The import of the module itself, alone or among others.
            text = re.sub(
                rf"^from (\S+) import (.*)\b{re.escape(name)}\b(, )?(.*)$",
                lambda m: f"from {m[1]} import {m[2]}{m[4]}".rstrip(", "),
                text, count=1, flags=re.M,
            )  # fmt: skip
            text = re.sub(r"^from \S+ import\s*$\n?", "", text, flags=re.M)
            outside = [a for a in attributes if a not in listed_before]
            if outside:
                text = re.sub(
                    r"^(?=(class|def|@) )",
                    f"from {module.__name__} import {', '.join(outside)}\n\n\n",
                    text, count=1, flags=re.M,
                )  # fmt: skip
            cell[0] = text

    def rewrite(self, code: str) -> str:
        """A code cell with its imports of listed objects taken from the definitions above."""
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return code
        self._unshadow(tree)
        lines = code.splitlines()
        for node in reversed(tree.body):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PACKAGE):
                        bound = alias.asname or alias.name.partition(".")[0]
                        self.module_aliases[bound] = importlib.import_module(
                            alias.name if alias.asname else alias.name.partition(".")[0]
                        )
            elif (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").startswith(PACKAGE)
            ):
                new = self._from_import(node)
                unchanged = [
                    f"from {node.module} import "
                    + ", ".join(a.name + (f" as {a.asname}" if a.asname else "")
                                for a in node.names)
                ]  # fmt: skip
                if new != unchanged:
                    end = node.end_lineno
                    if (
                        not new
                        and 0 < node.lineno - 1
                        and end < len(lines)
                        and not (lines[node.lineno - 2].strip() or lines[end].strip())
                    ):
                        end += 1  # no double blank line where the import was
                    lines[node.lineno - 1 : end] = "\n".join(new).splitlines()
        code = "\n".join(lines)
        # module.Name, where module is imported whole and Name is defined above.
        for alias, module in self.module_aliases.items():
            for name, listing in self.bindings.items():
                if getattr(module, name, None) is listing.obj:
                    code = re.sub(
                        rf"(?<![\w.]){re.escape(alias)}\.{re.escape(name)}\b",
                        name,
                        code,
                    )
        return code
