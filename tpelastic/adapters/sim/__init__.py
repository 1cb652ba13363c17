"""The simulator's edge: scenario files in, trace files and timeline pictures out."""
