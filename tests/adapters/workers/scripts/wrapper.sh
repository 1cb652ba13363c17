#!/bin/sh
# A wrapper script, as schedulers and users write them: the real worker is its child.
"$PYTHON" "$(dirname "$0")/tree.py" "$@"
