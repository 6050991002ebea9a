"""Drop sphinx-gallery's links from variables to the Python type they hold.

sphinx-gallery links every name in an example's code to its documentation, and a variable to
the documentation of its class. For a variable holding a built-in (``name`` a ``str``,
``measurements`` a ``dict``) that link leads to the ``str`` or ``dict`` page of the Python
docs: nothing a reader of that line wants, and on a long page hundreds of them (230 on "What
it costs", 44 kB of its 238 kB, which Lighthouse charges to the first paint). Links to
functions and classes named in the code (``print``, ``torch.Tensor``), and from variables to
torch and package classes, stay.
"""

from __future__ import annotations

from docutils import nodes
from sphinx.application import Sphinx

# The CSS classes sphinx-gallery's CodeLinksTransform puts on such a link.
BUILTIN_INSTANCE = {"sphx-glr-backref-module-builtins", "sphx-glr-backref-instance"}


def unlink_builtin_instances(
    app: Sphinx, doctree: nodes.document, docname: str
) -> None:
    """Replace each link from a variable to its built-in type by the link's own text."""
    for reference in list(doctree.findall(nodes.reference)):
        if BUILTIN_INSTANCE <= set(reference.get("classes", ())):
            # Not replace_self: given one node, it copies the link's classes onto it.
            parent, index = reference.parent, reference.parent.index(reference)
            parent[index : index + 1] = reference.children


def setup(app: Sphinx) -> dict[str, object]:
    # doctree-resolved runs after the post-transforms, sphinx-gallery's links included.
    app.connect("doctree-resolved", unlink_builtin_instances)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
