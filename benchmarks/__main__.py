"""``python -m benchmarks <name> [options]``: dispatch to ``benchmarks.<module>.<function>``.

Known names map to an entry point below; any other name ``foo`` runs ``benchmarks.foo.main``.
Every entry point has the signature ``main(argv: list[str]) -> int``.
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
}
ALL = ("play", "scrub", "jump", "profile", "scan", "patches")

USAGE = f"""usage: python -m benchmarks <name> [options]   (python -m benchmarks <name> --help)

names: {", ".join(ENTRY_POINTS)}, all ({" + ".join(ALL)})
common options: --small --repeat N --systems a,b --path P --timeout S --json-only --check
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


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name == "all":
        return run_all(rest)
    return int(resolve(name)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
