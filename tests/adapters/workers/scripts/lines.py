"""Print COUNT numbered lines on stdout as fast as possible: lines.py COUNT."""

import sys

for i in range(int(sys.argv[1])):
    sys.stdout.write(f"line {i}\n")
sys.stdout.flush()
