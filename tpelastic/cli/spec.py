"""``tpelastic spec``: print, write or check the generated transition tables in specs/tables/."""

from __future__ import annotations

import argparse
from pathlib import Path

from tpelastic.cli.errors import UsageError
from tpelastic.core.export import table_markdown
from tpelastic.core.machines import all_tables


def add_parser(commands: argparse._SubParsersAction, name: str) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(name, help="print, write or check the machines' transition tables")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write specs/tables/<machine>.md")
    mode.add_argument("--check", action="store_true", help="fail if specs/tables/ is out of date")
    parser.add_argument("--dir", default="specs/tables", help="where the tables live")


def rendered() -> dict[str, str]:
    return {f"{table.name}.md": table_markdown(table) for table in all_tables()}


def stale_files(directory: Path) -> list[str]:
    """Names of the generated files that are missing, different, or no longer generated."""
    want = rendered()
    have = {p.name for p in directory.glob("*.md")} if directory.is_dir() else set()
    stale = [name for name, text in want.items() if _read(directory / name) != text]
    return sorted(stale + sorted(have - set(want)))


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def run(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    if args.check:
        stale = stale_files(directory)
        if stale:
            raise UsageError(
                f"{directory} is out of date ({', '.join(stale)}): run `tpelastic spec --write`"
            )
        print(f"{directory}: up to date")
        return 0
    if args.write:
        directory.mkdir(parents=True, exist_ok=True)
        want = rendered()
        for old in directory.glob("*.md"):
            if old.name not in want:
                old.unlink()
        for name, text in want.items():
            (directory / name).write_text(text)
            print(f"wrote {directory / name}")
        return 0
    for text in rendered().values():
        print(text)
    return 0
