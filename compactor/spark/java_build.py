"""Our few Java classes, compiled on first use with the JDK's `javac` into the jar cache.

Each source is compiled against the jars the job runs with, once per version of its text (the
jar's folder carries the source's hash), so an upgrade of the package builds the new class and a
later start finds it in milliseconds.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from compactor.errors import DependencyResolutionError
from compactor.spark import jvm


def compiled_jar(source: Path, class_path: Sequence[Path], jar_name: str, without_javac: str) -> Path:
    """`source` compiled into `jar_name` in the jar cache, built when missing (seconds).
    `without_javac`: what to do when no JDK is there, for the error's message."""
    text = source.read_bytes()
    stem = jar_name.removeprefix("compactor-").removesuffix(".jar")
    target = jvm.cache_root() / "jars" / f"{stem}-{hashlib.sha256(text).hexdigest()[:12]}" / jar_name
    if target.is_file():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise DependencyResolutionError(
            f"`javac` is not on PATH: {source.name} is compiled with a JDK 17+ (a JRE is not "
            f"enough); install one, or {without_javac}"
        )
    with tempfile.TemporaryDirectory(prefix=f"compactor-{stem}-") as work:
        classes = Path(work, "classes")
        compile_line = [javac, "--release", "17", "-nowarn", "-cp", ":".join(map(str, class_path))]
        result = subprocess.run(
            [*compile_line, "-d", str(classes), str(source)], capture_output=True, text=True
        )
        if result.returncode != 0:
            raise DependencyResolutionError(
                f"javac could not compile {source.name}:\n{result.stderr.strip()}"
            )
        staged = Path(work, jar_name)
        with zipfile.ZipFile(staged, "w") as archive:  # a jar is a zip; the classes need no manifest
            for compiled in sorted(classes.rglob("*.class")):
                archive.write(compiled, compiled.relative_to(classes).as_posix())
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staged), str(target))  # whole or absent: a half-written jar is never found
    return target
