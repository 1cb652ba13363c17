"""Required environment variables, read with an error that names the missing variable."""

from __future__ import annotations

import os


class MissingEnvironmentVariable(KeyError):
    """A variable the worker needs was not set (or was empty)."""

    def __str__(self) -> str:
        # KeyError's own __str__ quotes its argument; ours is already a sentence.
        return str(self.args[0]) if self.args else ""


def get_env_variable_or_raise(name: str) -> str:
    """The value of environment variable ``name``.

    Raises:
        MissingEnvironmentVariable: (a ``KeyError``) naming ``name`` when it is unset or empty;
            the launcher sets the standard ones, so a missing one usually means the script was
            started without tpelastic.
    """
    value = os.environ.get(name)
    if value is None or value == "":
        raise MissingEnvironmentVariable(
            f"environment variable {name} is required but not set "
            "(is this process started by tpelastic?)"
        )
    return value
