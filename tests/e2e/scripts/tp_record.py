"""A worker that fails under tensorplay's own ``@record`` (its error-file format)."""

from tensorplay.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    raise RuntimeError("tensorplay-recorded failure")


main()
