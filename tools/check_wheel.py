"""Look inside a built wheel: the package's files and its metadata, nothing else.

Usage: ``python tools/check_wheel.py dist/double_backward-*.whl`` (``nox -s build`` runs it).
Exits non-zero, listing each problem, when the wheel holds a file outside the package and its
``.dist-info``, lacks a file of ``src/double_backward`` (bytecode aside), or its metadata does
not name the project, version and dependencies of ``pyproject.toml``.
"""

from __future__ import annotations

import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def wheel_problems(wheel: Path, root: Path = ROOT) -> list[str]:
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    package = root / "src" / "double_backward"
    expected = {
        "double_backward/" + path.relative_to(package).as_posix()
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    dist_info = f"double_backward-{project['version']}.dist-info/"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = Parser().parsestr(archive.read(dist_info + "METADATA").decode())
    problems = [f"not part of the package: {name}" for name in sorted(names)
                if not name.startswith(("double_backward/", dist_info))]  # fmt: skip
    package_files = {name for name in names if name.startswith("double_backward/")}
    problems += [
        f"missing from the wheel: {name}" for name in sorted(expected - package_files)
    ]
    problems += [f"not in src/: {name}" for name in sorted(package_files - expected)]
    if metadata["Name"] != project["name"] or metadata["Version"] != project["version"]:
        problems.append(f"metadata names {metadata['Name']} {metadata['Version']}")

    problems += dependency_problems(
        metadata.get_all("Requires-Dist") or [],
        metadata.get_all("Provides-Extra") or [],
        project,
    )
    if metadata.get("Description-Content-Type") != "text/markdown":
        problems.append(
            f"Description-Content-Type {metadata.get('Description-Content-Type')}"
        )
    readme = (root / project["readme"]).read_text()
    if metadata.get_payload().strip() != readme.strip():
        problems.append(f"the description is not {project['readme']}")
    return problems


# Python versions at which the markers are evaluated (setuptools is needed from 3.12 on).
MARKER_PYTHONS = ("3.10", "3.12")


def _selected(requirements: list[str], extra: str, python: str) -> set[str]:
    """``name`` + specifier of each requirement a pip install with ``extra`` takes on ``python``."""
    environment = {
        "extra": extra,
        "python_version": python,
        "python_full_version": python + ".0",
    }
    return {
        f"{req.name}{req.specifier}"
        for req in map(Requirement, requirements)
        if req.marker is None or req.marker.evaluate(environment)
    }


def dependency_problems(
    requires_dist: list[str], provides_extra: list[str], project: dict
) -> list[str]:
    """Where the wheel's Requires-Dist and Provides-Extra differ from pyproject.toml."""
    extras = project.get("optional-dependencies", {})
    problems = []
    if sorted(provides_extra) != sorted(extras):
        problems.append(
            f"Provides-Extra {sorted(provides_extra)}, expected {sorted(extras)}"
        )
    for python in MARKER_PYTHONS:
        for extra in ["", *extras]:
            expected = _selected(project["dependencies"], "", python)
            if extra:
                expected |= _selected(extras[extra], "", python)
            found = _selected(requires_dist, extra, python)
            if found != expected:
                name = f"[{extra}]" if extra else "(no extra)"
                problems.append(
                    f"Requires-Dist {name} on Python {python}: {sorted(found)}, "
                    f"expected {sorted(expected)}"
                )
    return problems


if __name__ == "__main__":
    (wheel,) = sys.argv[1:]
    found = wheel_problems(Path(wheel))
    print("\n".join(found) or f"{wheel}: package files and metadata only")
    sys.exit(1 if found else 0)
