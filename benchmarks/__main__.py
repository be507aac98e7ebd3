"""``python -m benchmarks <name> [options]``: dispatch to ``benchmarks.<module>.<function>``.

Known names map to an entry point below; any other name ``foo`` runs ``benchmarks.foo.main``.
Every entry point has the signature ``main(argv: list[str]) -> int``.

``--cube a,b`` or ``--cube all`` runs the benchmark once per cube (``--cube X`` each time)
and prints one combined table (:mod:`.combined`) after the per-cube ones.
"""

from __future__ import annotations

import importlib
import sys

ENTRY_POINTS = {
    "play": "play_scrub:main_play",
    "scrub": "play_scrub:main_scrub",
    "memory": "play_scrub:main_memory",
    "jump": "jump:main_jump",
    "profile": "jump:main_profile",
    "soak": "soak:main",
    "scan": "scan:main",
    "patches": "patches:main",
    "ui": "ui:main",
    "advise": "advise:main",
    "overhead": "overhead:main",
    "pyspy": "pyspy:main",
    "cubes": "cubes:main",
    "figures": "figures:main",
    "ab": "ab:main",
    "ncremote": "ncremote:main",
}
ALL = ("play", "scrub", "jump", "profile", "scan", "patches")
#: names that read no cube, or loop over the cubes themselves: --cube is theirs
CUBELESS = ("overhead", "ui", "cubes", "figures", "ab", "pyspy")

USAGE = f"""usage: python -m benchmarks <name> [options]   (python -m benchmarks <name> --help)

names: {", ".join(ENTRY_POINTS)}, all ({" + ".join(ALL)})
common options: --cube own|noisy|zstd|v2lz4|a,b|all --small --repeat N --systems a,b
                --path P --timeout S --json-only --check
the issue-30 table, every cube x every system:  python -m benchmarks figures
an A/B of two versions of tsexplore:           python -m benchmarks ab 443a17c
"""


def resolve(name: str):  # noqa: ANN201 - returns the entry point callable
    """The ``main(argv) -> int`` of benchmark ``name``."""
    target = ENTRY_POINTS.get(name, f"{name}:main")
    module_name, func = target.split(":")
    if not module_name.isidentifier() or module_name.startswith("_"):
        raise SystemExit(f"unknown benchmark {name!r}\n{USAGE}")
    try:
        module = importlib.import_module(f"benchmarks.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"benchmarks.{module_name}":
            raise SystemExit(f"unknown benchmark {name!r}\n{USAGE}") from exc
        raise
    return getattr(module, func)


def run_all(argv: list[str]) -> int:
    """play, scrub, jump, profile, scan and patches with the same options; the worst exit status."""
    status = 0
    for name in ALL:
        print(f"\n===== {name} =====", file=sys.stderr, flush=True)
        status = max(status, int(resolve(name)([*argv, "--from-all"]) or 0))
    return status


def cube_option(argv: list[str]) -> str | None:
    """The value of ``--cube`` in ``argv`` (the last one), or None."""
    value = None
    for i, arg in enumerate(argv):
        if arg == "--cube" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--cube="):
            value = arg.split("=", 1)[1]
    return value


def with_cube(argv: list[str], cube: str) -> list[str]:
    """``argv`` with every ``--cube`` replaced by ``--cube cube``."""
    out, skip = [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--cube" and i + 1 < len(argv):
            skip = True
            continue
        if arg.startswith("--cube="):
            continue
        out.append(arg)
    return [*out, "--cube", cube]


def dispatch(name: str, argv: list[str]) -> int:
    """Run benchmark ``name`` once (``all``: each of :data:`ALL`)."""
    if name == "all":
        return run_all(argv)
    return int(resolve(name)(argv) or 0)


def run_cubes(name: str, argv: list[str], cube_names: list[str]) -> int:
    """``name`` once per cube, then one combined table of everything it reported."""
    from . import combined, cubes, report

    json_only = "--json-only" in argv
    report.tables_only = not json_only
    report.silent = json_only
    first = len(report.collected)
    status = 0
    for cube in cube_names:
        print(f"\n===== {name} / cube {cube} =====", file=sys.stderr, flush=True)
        try:
            status = max(status, dispatch(name, with_cube(argv, cube)))
        except cubes.NoLayout as skip:
            print(skip.message, file=sys.stderr, flush=True)
    docs = report.collected[first:]
    if not docs:
        return status or 1
    title = (f"{name}, cubes {', '.join(cube_names)} (medians; each system in its own cold "
             "process)")
    return max(status, combined.finish(f"{name}-cubes", docs, title, json_only))


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    asked = cube_option(rest)
    if name not in CUBELESS and asked is not None and "-h" not in rest and "--help" not in rest:
        from . import cubes

        cube_names = cubes.names(asked)
        if len(cube_names) > 1:
            return run_cubes(name, rest, cube_names)
    try:
        return dispatch(name, rest)
    except SystemExit as exc:
        from .cubes import NoLayout

        if isinstance(exc, NoLayout):
            print(exc.message, file=sys.stderr, flush=True)
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
