"""code_links: links from variables to built-in types go; every other code link stays."""

from __future__ import annotations

from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

from code_links import unlink_builtin_instances


def code_link(text: str, module: str, objtype: str, *, instance: bool) -> nodes.reference:
    """A link as sphinx-gallery's CodeLinksTransform makes it (its CSS classes)."""
    classes = [f"sphx-glr-backref-module-{module}", f"sphx-glr-backref-type-{objtype}"]
    if instance:
        classes.append("sphx-glr-backref-instance")
    return nodes.reference("", "", nodes.inline(text, text, classes=["n"]), classes=classes)


def test_only_builtin_instance_links_are_removed_and_their_text_kept() -> None:
    document = new_document("example", get_default_settings(Parser))
    block = nodes.literal_block()
    block += code_link("measurements", "builtins", "py-class", instance=True)
    block += nodes.Text(" = ")
    block += code_link("load_measurements", "double_backward-costs", "py-function",
                       instance=False)  # fmt: skip
    block += code_link("print", "builtins", "py-function", instance=False)
    block += code_link("x", "torch", "py-class", instance=True)
    block += code_link("dict", "builtins", "py-class", instance=False)
    document += block

    unlink_builtin_instances(None, document, "example")  # type: ignore[arg-type]

    assert block.astext() == "measurements = load_measurementsprintxdict"
    remaining = [reference.astext() for reference in block.findall(nodes.reference)]
    assert remaining == ["load_measurements", "print", "x", "dict"]
    # the variable's token keeps its highlighting
    assert isinstance(block[0], nodes.inline) and block[0]["classes"] == ["n"]
