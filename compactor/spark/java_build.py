"""Our few Java classes, compiled on first use with the JDK's `javac` into the jar cache.

Each jar's sources are compiled against the jars the job runs with, once per version of their
text (the jar's folder carries their hash), so an upgrade of the package builds the new classes
and a later start finds them in milliseconds.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from compactor.errors import DependencyResolutionError
from compactor.spark import jvm

log = logging.getLogger(__name__)


def compiled_jar(
    sources: Sequence[Path], class_path: Sequence[Path], jar_name: str, without_javac: str
) -> Path:
    """`sources` compiled into `jar_name` in the jar cache, built when missing (seconds).
    `without_javac`: what to do when no JDK is there, for the error's message."""
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.read_bytes())
    names = ", ".join(source.name for source in sources)
    stem = jar_name.removeprefix("compactor-").removesuffix(".jar")
    target = jvm.cache_root() / "jars" / f"{stem}-{digest.hexdigest()[:12]}" / jar_name
    if target.is_file():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise DependencyResolutionError(
            f"`javac` is not on PATH: {names} is compiled with a JDK 17+ (a JRE is not "
            f"enough); install one, or {without_javac}"
        )
    with tempfile.TemporaryDirectory(prefix=f"compactor-{stem}-") as work:
        classes = Path(work, "classes")
        compile_line = [javac, "--release", "17", "-nowarn", "-cp", ":".join(map(str, class_path))]
        result = subprocess.run(
            [*compile_line, "-d", str(classes), *map(str, sources)], capture_output=True, text=True
        )
        if result.returncode != 0:
            raise DependencyResolutionError(f"javac could not compile {names}:\n{result.stderr.strip()}")
        staged = Path(work, jar_name)
        with zipfile.ZipFile(staged, "w") as archive:  # a jar is a zip; the classes need no manifest
            for compiled in sorted(classes.rglob("*.class")):
                archive.write(compiled, compiled.relative_to(classes).as_posix())
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staged), str(target))  # whole or absent: a half-written jar is never found
    return target


def optional(build: Callable[[], Path], without: str) -> list[Path]:
    """The jar `build` makes, or none when it cannot be built here: then the log says so, and
    `without` (what the job does without it)."""
    try:
        return [build()]
    except DependencyResolutionError as refused:
        log.warning("%s: %s", without, refused)
        return []
