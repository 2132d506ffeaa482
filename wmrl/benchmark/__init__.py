"""Benchmarks of WMRL against real-execution GRPO: report arithmetic (`report`)."""
