"""Contributor sessions: ``nox`` runs tests and docs; ``nox -s serve`` previews the docs live."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = (
    "virtualenv"  # pip, which finds the local CPU torch wheel
)
nox.options.sessions = ["tests", "docs"]

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
# torch==2.13.0 by default; point DOUBLE_BACKWARD_CONSTRAINTS at another file to change the pins.
CONSTRAINTS = os.environ.get(
    "DOUBLE_BACKWARD_CONSTRAINTS", str(ROOT / "constraints.txt")
)
DOCS_OUT = ROOT / "docs" / "_build" / "html"
# Beside the HTML, not inside it: the HTML tree holds only what is served.
DOCTREES = ROOT / "docs" / "_build" / "doctrees"
sys.path.insert(0, str(ROOT / "tools"))
import install_stamps  # noqa: E402
from install_stamps import STAMP as INSTALL_STAMP  # noqa: E402
from layered_venv import installed, layered_venv  # noqa: E402
from sphinx_build import arguments, reproducible_env  # noqa: E402  (the one sphinx-build command)


def install_once(session: nox.Session, stamp: Path, depends_on: dict, *command: str,
                 **run: object) -> None:  # fmt: skip
    """install_stamps.install_once (``command`` run unless ``stamp`` records that it succeeded
    with the same ``depends_on``), after the venv sets no longer kept are removed."""
    prune_old_venv_sets()
    install_stamps.install_once(session, stamp, depends_on, *command, **run)


def what_pip_reads(requirements: list[str], constraints: str | Path) -> dict:
    """What a pip install of the package (editable) and ``requirements`` depends on: the
    clone's path (where the editable install points), pyproject.toml and the pins."""
    return {
        "root": str(ROOT), "requirements": requirements,
        "constraints": Path(constraints).read_text(),
        "pyproject.toml": (ROOT / "pyproject.toml").read_text(),
    }  # fmt: skip


def install(session: nox.Session, *groups: str) -> None:
    """Install the package (editable, with every extra: the pages and tests use them all) and
    the named dependency groups under the constraints, unless nothing they depend on changed
    since the last install into this venv."""
    requirements = [
        "-e", f"{ROOT}[pages]",
        *(req for group in groups for req in nox.project.dependency_groups(PYPROJECT, group)),
    ]  # fmt: skip
    install_once(
        session, Path(session.virtualenv.location) / INSTALL_STAMP,
        what_pip_reads(requirements, CONSTRAINTS),
        "python", "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS, *requirements,
    )  # fmt: skip


def require_graphviz(session: nox.Session) -> None:
    """Stop at once, saying how to install it, when Graphviz's ``dot`` is not on PATH."""
    if shutil.which("dot") is None:
        session.error(
            "Graphviz's `dot` program was not found on PATH; the graphs need it.\n"
            "  Debian/Ubuntu: sudo apt-get install -y graphviz\n"
            "  macOS:         brew install graphviz\n"
            "  conda:         conda install -c conda-forge graphviz"
        )


def require_compiler(session: nox.Session) -> None:
    """Stop at once, saying how to install one, when there is no C++ compiler to build
    the C++ extension example with (torch runs ``$CXX``, else ``c++``)."""
    compiler = os.environ.get("CXX") or "c++"
    if shutil.which(compiler) is None:
        session.error(
            f"No C++ compiler: `{compiler}` was not found; the C++ extension example needs one.\n"
            "  Debian/Ubuntu: sudo apt-get install -y g++\n"
            "  macOS:         xcode-select --install\n"
            "  conda:         conda install -c conda-forge cxx-compiler\n"
            "  or set CXX to a compiler's path"
        )


# pytest-xdist: one worker per CPU, each handed the next test as it frees up (the 1e6-element
# tests take seconds, most take milliseconds). `-- -n 0` runs in one process, for a debugger.
PARALLEL_PYTEST = ("-n", "auto", "--dist", "worksteal")


def one_thread_per_worker() -> dict[str, str]:
    """torch's threads per xdist worker: one, unless set (workers x threads = CPUs; two
    workers of two threads each on two CPUs wait on each other's spinning threads)."""
    return {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite with coverage of src/ (at least 95% of lines and branches)."""
    require_graphviz(session)
    require_compiler(session)
    install(session, "test")
    # pytest-cov combines the workers' coverage; fail_under (pyproject.toml) applies to it.
    session.run("pytest", *PARALLEL_PYTEST, "--cov", "--cov-report=term-missing",
                *session.posargs, env=one_thread_per_worker())  # fmt: skip


@nox.session
def tests_models(session: nox.Session) -> None:
    """check_model on real models (timm, transformers, torch.nn; tests/models), each verdict
    established with plain torch. Arguments after `--` go to pytest."""
    install(session, "models")
    # timm without its dependencies: its torchvision is a CUDA build for torch 2.13.
    without_deps = PYPROJECT["tool"]["double_backward"]["models-without-deps"]
    session.install("--no-deps", "-c", CONSTRAINTS, *without_deps)
    # test_patching.py: ops.replaced() on a transformers model, skipped where it is missing.
    session.run("pytest", *PARALLEL_PYTEST, "tests/models", "tests/ops/test_patching.py",
                *session.posargs, env=one_thread_per_worker())  # fmt: skip


# The torch releases the suite is run on: the pin (constraints.txt) and the newest release.
# The lowest is pyproject's floor (see CONTRIBUTING.md); tests/test_torch_versions.py checks it.
TORCH_VERSIONS = PYPROJECT["tool"]["double_backward"]["tested-torch"]


def cache_root() -> Path:
    """The package's cache folder (the C++ build's too): ``$DOUBLE_BACKWARD_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/double_backward`` or ``~/.cache/double_backward``."""
    configured = os.environ.get("DOUBLE_BACKWARD_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "double_backward"


def venvs_key() -> str:
    """Names what the sessions' venvs hold: this Python, the pins and every dependency list of
    pyproject.toml. A change to any of them gives new venvs, so none keeps a package that is
    no longer required (one that would hide a missing dependency)."""
    project = PYPROJECT["project"]
    spec = {
        "python": list(sys.version_info[:2]),
        "constraints": Path(CONSTRAINTS).read_text(),
        "dependencies": project.get("dependencies", []),
        "extras": project.get("optional-dependencies", {}),
        "groups": PYPROJECT.get("dependency-groups", {}),
        "without-deps": PYPROJECT["tool"]["double_backward"]["models-without-deps"],
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    return f"py{sys.version_info.major}{sys.version_info.minor}-{digest}"


# Every session's venv, kept in the cache folder, outside the clone, and reused by every clone
# and run while what they hold is unchanged (venvs_key): CI's fresh clone then installs
# nothing but the package itself (editable, pointing at that clone). Installing them took
# 7 minutes of each CI run. `--envdir .nox` keeps a clone's venvs of its own instead.
VENVS = cache_root() / "nox" / venvs_key()
nox.options.envdir = str(VENVS)
nox.options.reuse_venv = "yes"
KEEP_VENV_SETS = 2  # the newest sets of venvs kept; older ones are removed (1.1-1.4 GB a venv)


@functools.cache  # once per nox run, by the first session that installs
def prune_old_venv_sets() -> None:
    """Mark this set of venvs as used now; remove all but the newest KEEP_VENV_SETS sets.

    Called where a session installs (install_once), not when the noxfile is imported: `nox -l`
    and .ci/run's look-up of VENVS remove nothing."""
    install_stamps.prune_sets(VENVS, KEEP_VENV_SETS)


def own_venv(session: nox.Session, venv: Path, constraints: str | Path, group: str) -> str:
    """A venv nox does not manage (kept outside the clone, or shared by several sessions), made
    on first use, with the package (editable, every extra) and a dependency group installed
    under the constraints. Returns the venv's python.

    The install is run again when what it depends on changed (the clone's path, pyproject.toml,
    the constraints, the group), which a stamp in the venv records once it has succeeded: an
    interrupted install is completed by the next run, and sessions that share the venv can run
    at once after one of them installed it (.ci/run's benchmarks: pip re-applying an editable
    install rewrites it, and took 6 s a session).
    """
    requirements = ["-e", f"{ROOT}[pages]", *nox.project.dependency_groups(PYPROJECT, group)]
    python = install_stamps.make_venv(session, venv)
    install_once(
        session, venv / INSTALL_STAMP, what_pip_reads(requirements, constraints),
        str(python), "-m", "pip", "install", "--quiet", "-c", str(constraints), *requirements,
        external=True,
    )  # fmt: skip
    return str(python)


def torch_venv(session: nox.Session, torch_version: str) -> str:
    """A venv with ``torch==torch_version``, the package (editable) and the test group.

    Kept in the cache folder, outside the clone, so that torch (5.5 GB for 2.14.1) is installed
    once per machine, not once per clone: CI's fresh clone reuses it. Returns the venv's python.
    """
    abi = f"py{sys.version_info.major}{sys.version_info.minor}"
    venv = cache_root() / "venvs" / f"torch-{torch_version}-{abi}"
    # The project's pins, with torch's replaced by the one asked for.
    pins = [
        line for line in Path(CONSTRAINTS).read_text().splitlines()
        if not line.replace(" ", "").startswith("torch==")
    ]  # fmt: skip
    constraints = venv / "constraints.txt"
    venv.mkdir(parents=True, exist_ok=True)  # `python -m venv` makes its venv in it all the same
    constraints.write_text("\n".join([*pins, f"torch=={torch_version}", ""]))
    return own_venv(session, venv, constraints, "test")


@nox.session(venv_backend="none")
@nox.parametrize("torch", TORCH_VERSIONS, ids=TORCH_VERSIONS)
def tests_torch(session: nox.Session, torch: str) -> None:
    """The test suite on each tested torch release; `nox -s "tests_torch(2.14.1)"`: on one.

    Arguments after `--` go to pytest."""
    require_graphviz(session)
    require_compiler(session)
    python = torch_venv(session, torch)
    session.run(python, "-m", "pytest", *PARALLEL_PYTEST, *session.posargs,
                external=True, env=one_thread_per_worker())  # fmt: skip


@nox.session(venv_backend="none")
def matrix(session: nox.Session) -> None:
    """Measure the matrix, error index and built-ins on a torch release, to commit: `-- 2.14.1`.

    Writes docs/_data/<name>/torch-<release>.json; without arguments, for every tested
    release. The docs build shows them beside the installed torch's.

    `-- --device cuda`, on a machine with a GPU: runs the CUDA probes (docs/_ext/cuda_results.py)
    with the Python that runs nox and its CUDA torch, and writes
    src/double_backward/measurements/cuda/torch-<release>.json (what each probe raised, word for
    word; the GPU, its compute capability, torch, CUDA and cuDNN versions, the date) to commit."""
    if "--device" in session.posargs:
        device = session.posargs[session.posargs.index("--device") + 1 :][:1]
        if device != ["cuda"]:
            session.error(f"--device takes cuda (the CPU is the default), got {device}")
        session.run(sys.executable, "docs/_ext/cuda_results.py", "--device", "cuda",
                    external=True)  # fmt: skip
        return
    releases = session.posargs or TORCH_VERSIONS
    unknown = sorted(set(releases) - set(TORCH_VERSIONS))
    if unknown:
        session.error(
            f"Not a tested torch release: {', '.join(unknown)}. Tested: "
            f"{', '.join(TORCH_VERSIONS)} (tested-torch in pyproject.toml)"
        )
    require_graphviz(session)
    require_compiler(session)
    for release in releases:
        python = torch_venv(session, release)
        session.run(python, "docs/_ext/versioned_results.py", external=True)


@nox.session(reuse_venv=True)
def docs(session: nox.Session) -> None:
    """Build the HTML docs, executing every example. Extra arguments go to sphinx-build."""
    require_graphviz(session)
    require_compiler(session)
    install(session, "docs")
    # SOURCE_DATE_EPOCH: the last commit's time, so that `nox -s site` can compare this build
    # with a clean build of its own (its reproducibility check).
    session.run("python", "-m", "sphinx",
                *arguments("docs", DOCS_OUT, *session.posargs, doctrees=DOCTREES),
                env=reproducible_env())  # fmt: skip


@nox.session(reuse_venv=True)
def serve(session: nox.Session) -> None:
    """Preview the docs at http://127.0.0.1:8000, rebuilding when a page or example changes."""
    require_graphviz(session)
    install(session, "serve")
    watch_and_ignore = (
        "--watch", "examples", "--watch", "src",
        "--ignore", str(ROOT / "docs" / "auto_examples"),
        "--ignore", str(ROOT / "docs" / "gen_modules"),
    )  # fmt: skip
    session.run(
        "sphinx-autobuild", "--host", "127.0.0.1", "--port", "8000", *watch_and_ignore,
        "-d", str(DOCTREES), "docs", str(DOCS_OUT), *session.posargs,
    )  # fmt: skip


# One venv for the four benchmark sessions: they need the same things (the package with every
# extra; `bench` also the docs group, which the others do not mind), so torch (1.1 GB, about
# 25 s to install) is installed once for all four, not four times.
BENCH_VENV = VENVS / "bench-shared"


# npm's packages (the Nu validator, axe-core, Lighthouse) beside the venvs, outside the clone,
# which links its node_modules there (npm_ci).
NPM_PREFIX = VENVS / "npm"


def npm_ci(session: nox.Session) -> None:
    """``npm ci`` into NPM_PREFIX, unless it was installed there from the same package.json
    and package-lock.json (a stamp records them once it succeeded); then the clone's
    node_modules is a link to it. npm ci removes node_modules and installs it whole each
    time: 17 s in each fresh clone of CI (d3dd35a), where node_modules was the clone's own."""
    needs = ("package.json", "package-lock.json")
    NPM_PREFIX.mkdir(parents=True, exist_ok=True)
    for name in needs:
        shutil.copyfile(ROOT / name, NPM_PREFIX / name)
    install_once(
        session, NPM_PREFIX / INSTALL_STAMP, {name: (ROOT / name).read_text() for name in needs},
        "npm", "ci", "--no-audit", "--no-fund", "--prefix", str(NPM_PREFIX), external=True,
    )  # fmt: skip
    link, installed = ROOT / "node_modules", NPM_PREFIX / "node_modules"
    if link.is_symlink() and link.readlink() == installed:
        return
    if link.is_symlink():
        link.unlink()
    elif link.exists():
        shutil.rmtree(link)  # a clone's own node_modules, from before NPM_PREFIX
    link.symlink_to(installed, target_is_directory=True)


def bench_venv(session: nox.Session) -> tuple[str, dict[str, str]]:
    """The benchmarks' venv: its python, and the environment to run it in."""
    python = own_venv(session, BENCH_VENV, CONSTRAINTS, "docs")
    # The venv's bin first on PATH, as in a session's own venv: torch finds ninja there.
    bin_dir = Path(python).parent
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "VIRTUAL_ENV": str(BENCH_VENV)}  # fmt: skip
    return python, env


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Time clean, no-change and one-edit docs builds against the examples run alone."""
    require_graphviz(session)
    require_compiler(session)
    python, env = bench_venv(session)
    session.run(python, "benchmarks/docs_build.py", *session.posargs, env=env, external=True)


@nox.session(venv_backend="none")
def bench_checker(session: nox.Session) -> None:
    """Time and memory of one double_backward.check, 1e3 to 1e6 elements, and its detection
    rate on a planted 5% error."""
    python, env = bench_venv(session)
    session.run(python, "benchmarks/checker_scaling.py", *session.posargs, env=env, external=True)


@nox.session(venv_backend="none")
def bench_functions(session: nox.Session) -> None:
    """Time each Function against its native op, count saved bytes; `-- --quick` to try.

    `-- --device cuda`: ops' attention against MATH on the GPU, issue 28's targets side by side
    (`-- --device cpu --quick` tries that code path without a GPU)."""
    python, env = bench_venv(session)
    session.run(python, "benchmarks/functions.py", *session.posargs, env=env, external=True)
    # The softmax and LayerNorm Functions of "Deriving double backward", into their own JSON.
    # --quick and --rounds apply to both scripts; --part, --only and the output paths are
    # functions.py's own, and a run that names one times only what it names.
    # --device (cuda) times only the attention targets on that device.
    if not {"--part", "--only", "--output", "--attention-output", "--device"} & {
        arg.split("=")[0] for arg in session.posargs
    }:
        session.run(python, "benchmarks/softmax_layer_norm.py", *session.posargs,
                    env=env, external=True)  # fmt: skip


@nox.session(venv_backend="none")
def bench_call_overhead(session: nox.Session) -> None:
    """Time a custom operator's call against a Function's, and an aot_eager compile."""
    python, env = bench_venv(session)
    session.run(python, "benchmarks/call_overhead.py", *session.posargs, env=env, external=True)


# A reader's venv: torch and NumPy, what the package requires, and a Jupyter kernel; nothing of
# this project. The site checks install the package into it from the served site, with no extra,
# and one extra from the wheelhouse, to show what each install takes.
READER_VENV = VENVS / "site-reader"
# The venv the downloads run in: the reader's venv (through a .pth file) plus the dependencies of
# the extras the pages use, installed here in advance: the checks run offline.
PAGES_READER_VENV = VENVS / "site-reader-pages"
# Wheels of the "graphs" extra, for installing it on request with no network.
WHEELHOUSE = VENVS / "site-wheelhouse"


# Run by the pages venv's python: a .pth file making the reader's venv (argv[1]) importable.
_LAYER_VENV = (
    "import pathlib, subprocess, sys, sysconfig; "
    "purelib = \"import sysconfig; print(sysconfig.get_paths()['purelib'])\"; "
    "reader = subprocess.check_output([sys.argv[1], '-c', purelib], text=True).strip(); "
    "pathlib.Path(sysconfig.get_paths()['purelib'], 'site-reader.pth').write_text(reader + '\\n')"
)


@nox.session(reuse_venv=True)
def site(session: nox.Session) -> None:
    """Check the built site as readers meet it: browser, accessibility, links, HTML, downloads.

    Run after `nox -s docs`. Needs Debian's chromium, Java and npm (see .ci/run). Everything
    is installed first, so the checks themselves run offline: `nox -s site --install-only`,
    then `nox -R -s site` with no network.
    """
    install(session, "site")
    npm_ci(session)
    extras = PYPROJECT["project"]["optional-dependencies"]
    # Kept between runs with the session's venv (VENVS): made once, each install run again
    # only when what it installs changed (install_once). The checks never install into them:
    # each worker layers a venv of its own over them (site_tests/conftest.py).
    reader_python = install_stamps.make_venv(session, READER_VENV)
    pages_python = install_stamps.make_venv(session, PAGES_READER_VENV)
    pins = Path(CONSTRAINTS).read_text()
    # ipykernel: the checks run the notebooks in these venvs, as Jupyter would.
    reader_needs = [*PYPROJECT["project"]["dependencies"], "ipykernel"]
    install_once(
        session, READER_VENV / INSTALL_STAMP, {"requirements": reader_needs, "pins": pins},
        str(reader_python), "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS,
        *reader_needs, external=True,
    )  # fmt: skip
    session.run_install(
        str(pages_python), "-c", _LAYER_VENV, str(reader_python), external=True
    )
    install_once(
        session, PAGES_READER_VENV / INSTALL_STAMP,
        {"over": str(reader_python), "requirements": extras["pages"], "pins": pins},
        str(pages_python), "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS,
        *extras["pages"], external=True,
    )  # fmt: skip
    install_once(
        session, WHEELHOUSE / INSTALL_STAMP, {"wheels of": extras["graphs"], "pins": pins},
        str(reader_python), "-m", "pip", "wheel", "--quiet", "--no-deps", "-c", CONSTRAINTS,
        "--wheel-dir", str(WHEELHOUSE), *extras["graphs"], external=True,
    )  # fmt: skip
    # On every core: the reader's site is built once for all workers, and each worker runs the
    # downloads in a venv of its own over the reader's (site_tests/conftest.py).
    session.run(
        "pytest", "site_tests", *PARALLEL_PYTEST, *session.posargs,
        env={
            "DOUBLE_BACKWARD_READER_PYTHON": str(pages_python),
            "DOUBLE_BACKWARD_BARE_READER_PYTHON": str(reader_python),
            "DOUBLE_BACKWARD_WHEELHOUSE": str(WHEELHOUSE),
            **one_thread_per_worker(),
        },
    )  # fmt: skip


# The venv the built wheel is installed over: the package's requirements (torch, NumPy) alone.
BUILD_BASE_VENV = VENVS / "build-base"


@nox.session
def build(session: nox.Session) -> None:
    """Build the sdist and wheel, check them, install the wheel in a new venv and use it."""
    session.install("build>=1.2", "twine>=5")
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    if session.run("python", "-m", "build", "--outdir", str(dist), str(ROOT)) is None:
        return  # --install-only: nothing was built to check
    session.run("twine", "check", "--strict", *map(str, sorted(dist.iterdir())))
    (wheel,) = dist.glob("*.whl")
    session.run("python", "tools/check_wheel.py", str(wheel))
    # The clean venv: a new one, over a kept venv holding only what the package requires
    # (layered_venv): pip finds those installed and adds the package alone. Installing torch
    # into a new venv each run took 36 of this session's 56 CPU seconds (2026-12-08).
    requirements = PYPROJECT["project"]["dependencies"]
    base_python = install_stamps.make_venv(session, BUILD_BASE_VENV)
    install_once(
        session, BUILD_BASE_VENV / INSTALL_STAMP,
        {"requirements": requirements, "pins": Path(CONSTRAINTS).read_text()},
        str(base_python), "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS,
        *requirements, external=True,
    )  # fmt: skip
    clean = Path(session.create_tmp()) / "clean-venv"
    shutil.rmtree(clean, ignore_errors=True)
    python = str(layered_venv(base_python, clean))
    before = installed(python)
    session.run(python, "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS, str(wheel),
                external=True)  # fmt: skip
    added = sorted(set(installed(python)) - set(before))
    if added != ["double-backward"]:
        session.error(f"installing the wheel over what it requires added {added}, "
                      "expected double-backward alone")  # fmt: skip
    session.run(
        python, "-c",
        "import double_backward as db, torch; x = torch.tensor(1.5, dtype=torch.float64, "
        "requires_grad=True); report = db.check(db.Square.apply, x); print(report); "
        "assert report.ok, report",
        external=True,
    )  # fmt: skip
    # torch and NumPy only: drawing a graph names the extra it needs.
    session.run(
        python, "-c",
        "try:\n    import double_backward.graph\nexcept ImportError as error:\n"
        "    assert 'double-backward[graphs]' in str(error), error\n"
        "else:\n    raise SystemExit('torchviz came with the package: not an extra')",
        external=True,
    )  # fmt: skip


@nox.session(python=False)
def audit(session: nox.Session) -> None:
    """Lighthouse scores (mobile) of the index and every example page; run after `docs`."""
    npm_ci(session)
    session.run(sys.executable, "tools/audit.py", *session.posargs, external=True)
