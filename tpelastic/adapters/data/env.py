"""Required environment variables, read with an error that names the missing variable."""

from __future__ import annotations

import os


class MissingEnvironmentVariable(ValueError, KeyError):
    """A variable the worker needs was not set: a ``ValueError`` as torch raises (and a
    ``KeyError``, for code that catches that)."""

    def __str__(self) -> str:
        # KeyError's own __str__ quotes its argument; ours is already a sentence.
        return str(self.args[0]) if self.args else ""


def get_env_variable_or_raise(env_name: str) -> str:
    """The value of environment variable ``env_name`` (an empty value is returned, as torch's).

    Raises:
        MissingEnvironmentVariable: (a ``ValueError``) naming ``env_name`` when it is unset; the
            launcher sets the standard ones, so a missing one usually means the script was
            started without tpelastic.
    """
    value = os.environ.get(env_name)
    if value is None:
        raise MissingEnvironmentVariable(
            f"environment variable {env_name} is required but not set "
            "(is this process started by tpelastic?)"
        )
    return value
