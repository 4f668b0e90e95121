"""The benchmarks themselves, briefly: each runs and reports what it should."""
